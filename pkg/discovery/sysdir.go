package discovery

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysDir is a sysfs directory whose attributes are read with openat
// relative to an open directory: either the directory itself, or (a view
// made by sub) an ancestor, so one open device directory serves the reads
// of all its children and a full pass resolves no deep path per attribute.
type sysDir struct {
	fd    int    // the open directory reads are relative to
	rel   string // "" or this directory's path from fd, ending in "/"
	path  string // this directory's path, for errors
	owned bool   // whether close closes fd
	// tr, when set, notes every attribute read (see Tracker).
	tr *Tracker
}

func openSysDir(path string) (sysDir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return sysDir{fd: -1}, fmt.Errorf("open %s: %w", path, err)
	}
	return sysDir{fd: fd, path: path, owned: true}, nil
}

// sub returns a view of the child directory name that reads through d's
// open directory. It makes no system call; the view is valid while d is
// open, and closing it does nothing.
func (d sysDir) sub(name string) sysDir {
	return sysDir{fd: d.fd, rel: d.rel + name + "/", path: d.path + "/" + name, tr: d.tr}
}

// tracked returns d noting its reads in tr.
func (d sysDir) tracked(tr *Tracker) sysDir {
	d.tr = tr
	return d
}

// ancestor returns a view of the directory at path, an ancestor of d's
// open directory, that reads through that directory with "../" steps. It
// makes no system call; ok is false when path is not such an ancestor.
// sysfs directories have one parent, so the steps reach path as long as
// path was found by walking down from it.
func (d sysDir) ancestor(path string) (sysDir, bool) {
	base := d.path
	if rel := strings.TrimSuffix(d.rel, "/"); rel != "" {
		if base, _ = strings.CutSuffix(d.path, "/"+rel); base == d.path {
			return sysDir{}, false
		}
	}
	if base == path {
		return sysDir{fd: d.fd, path: path, tr: d.tr}, d.fd >= 0
	}
	rest, ok := strings.CutPrefix(base, path+"/")
	if !ok || path == "" || d.fd < 0 {
		return sysDir{}, false
	}
	return sysDir{fd: d.fd, rel: strings.Repeat("../", strings.Count(rest, "/")+1), path: path, tr: d.tr}, true
}

func (d sysDir) close() {
	if d.owned && d.fd >= 0 {
		_ = unix.Close(d.fd)
	}
}

// dirEntry is a directory entry with the inode number the listing
// reported.
type dirEntry struct {
	name string
	ino  uint64
}

// entries lists the directory (unsorted, without . and ..).
func (d sysDir) entries() ([]dirEntry, error) {
	var out []dirEntry
	err := d.eachEntry(func(name []byte, ino uint64) { out = append(out, dirEntry{name: string(name), ino: ino}) })
	return out, err
}

// eachEntry calls f with the name and inode number of every entry of the
// directory (unsorted, without . and ..). name is valid during the call
// only: a caller looking for a few entries copies those and allocates
// nothing for the others.
func (d sysDir) eachEntry(f func(name []byte, ino uint64)) error {
	d.tr.At(d.path, "")
	fd := d.fd
	if d.rel != "" {
		var err error
		if fd, err = unix.Openat(d.fd, d.rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("open %s: %w", d.path, err)
		}
		defer unix.Close(fd)
	}
	// name goes to a function the compiler cannot see into, so the buffer
	// escapes to the heap: pooled, rather than 8 KiB per listing.
	buf := direntBuffers.Get().(*[8192]byte)
	defer direntBuffers.Put(buf)
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return fmt.Errorf("list %s: %w", d.path, err)
		}
		if n <= 0 {
			return nil
		}
		walkDirents(buf[:n], f)
	}
}

// direntBuffers holds getdents buffers for eachEntry.
var direntBuffers = sync.Pool{New: func() any { return new([8192]byte) }}

// parseDirents appends the entries of a getdents64 buffer to out (see
// walkDirents).
func parseDirents(b []byte, out []dirEntry) []dirEntry {
	walkDirents(b, func(name []byte, ino uint64) { out = append(out, dirEntry{name: string(name), ino: ino}) })
	return out
}

// walkDirents calls f for each entry of a getdents64 buffer (struct
// linux_dirent64: ino u64, off s64, reclen u16, type u8, name NUL-padded),
// skipping . and .. and stopping at a malformed record.
func walkDirents(b []byte, f func(name []byte, ino uint64)) {
	const nameOff = 19
	for len(b) >= nameOff {
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < nameOff || reclen > len(b) {
			break
		}
		ino := binary.NativeEndian.Uint64(b[0:8])
		name := b[nameOff:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		b = b[reclen:]
		if s := string(name); s != "." && s != ".." && s != "" {
			f(name, ino)
		}
	}
}

// names lists the directory's entry names (unsorted, without . and ..).
func (d sysDir) names() ([]string, error) {
	entries, err := d.entries()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	return names, nil
}

// read returns an attribute's content with surrounding white space removed.
func (d sysDir) read(name string) (string, error) {
	d.tr.At(d.path, name)
	s, err := readAttrAt(d.fd, d.rel, name)
	if err != nil {
		return "", fmt.Errorf("read %s/%s: %w", d.path, name, err)
	}
	return s, nil
}

// readPath reads the attribute at path: relative to d's open directory
// when path lies below d, else from the path itself.
func (d sysDir) readPath(path string) (string, error) {
	if rest, ok := strings.CutPrefix(path, d.path+"/"); ok && d.fd >= 0 {
		return d.read(rest)
	}
	d.tr.At("", path)
	s, err := readAttrAt(unix.AT_FDCWD, "", path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}

// readAttrAt reads the sysfs attribute rel+name relative to dirfd
// (unix.AT_FDCWD for a plain path) without the os.File machinery: sysfs
// attributes are at most a page and one read returns all of it.
func readAttrAt(dirfd int, rel, name string) (string, error) {
	fd, err := openAt(dirfd, rel, name)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var buf [4096]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// openAt opens rel+name relative to dirfd for reading. A scan opens
// thousands of files, so it builds the C string on the stack instead of
// allocating it, as unix.Openat does.
func openAt(dirfd int, rel, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_CLOEXEC
	var path [512]byte
	if len(rel)+len(name) >= len(path) {
		return unix.Openat(dirfd, rel+name, flags, 0)
	}
	n := copy(path[:], rel)
	n += copy(path[n:], name)
	path[n] = 0
	fd, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&path[0])), flags, 0, 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// readID reads an ID attribute in canonical form.
func (d sysDir) readID(name string) (string, error) {
	s, err := d.read(name)
	if err != nil {
		return "", err
	}
	return parseID(d.path+"/"+name, s)
}

// readIDPath reads the ID attribute at path (see readPath) in canonical
// form.
func (d sysDir) readIDPath(path string) (string, error) {
	s, err := d.readPath(path)
	if err != nil {
		return "", err
	}
	return parseID(path, s)
}
