package discovery

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

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
	return sysDir{fd: d.fd, rel: d.rel + name + "/", path: d.path + "/" + name}
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
	fd := d.fd
	if d.rel != "" {
		var err error
		if fd, err = unix.Openat(d.fd, d.rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("open %s: %w", d.path, err)
		}
		defer unix.Close(fd)
	}
	var buf [8192]byte
	var out []dirEntry
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", d.path, err)
		}
		if n <= 0 {
			return out, nil
		}
		out = parseDirents(buf[:n], out)
	}
}

// parseDirents appends the entries of a getdents64 buffer (struct
// linux_dirent64: ino u64, off s64, reclen u16, type u8, name NUL-padded)
// to out, skipping . and .. and stopping at a malformed record.
func parseDirents(b []byte, out []dirEntry) []dirEntry {
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
			out = append(out, dirEntry{name: s, ino: ino})
		}
	}
	return out
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
	s, err := readAttrAt(d.fd, d.rel+name)
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
	s, err := readAttrAt(unix.AT_FDCWD, path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}

// readAttrAt reads a sysfs attribute relative to dirfd (unix.AT_FDCWD for
// a plain path) without the os.File machinery: sysfs attributes are at most
// a page and one read returns all of it.
func readAttrAt(dirfd int, name string) (string, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
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

// readID reads an ID attribute in canonical form.
func (d sysDir) readID(name string) (string, error) {
	s, err := d.read(name)
	if err != nil {
		return "", err
	}
	return parseID(d.path+"/"+name, s)
}
