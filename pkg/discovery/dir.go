package discovery

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is an open sysfs directory whose attributes a family reads with
// openat, each read bounded in size and noted in its Tracker; Sub and
// View make views that read through it without opening their own.
type Dir struct{ d sysDir }

// OpenDir opens the sysfs directory at path; Close closes it.
func OpenDir(path string) (Dir, error) {
	d, err := openSysDir(path)
	return Dir{d}, err
}

// Close closes the directory, not a view of it.
func (d Dir) Close() { d.d.close() }

// Path is the directory's path.
func (d Dir) Path() string { return d.d.path }

// Tracked returns d noting its reads in tr.
func (d Dir) Tracked(tr *Tracker) Dir { return Dir{d.d.tracked(tr)} }

// Sub returns a view of the child directory name, valid while d is open.
func (d Dir) Sub(name string) Dir { return Dir{d.d.sub(name)} }

// Read returns the attribute name (a path relative to d), trimmed.
func (d Dir) Read(name string) (string, error) { return d.d.read(name) }

// EachEntry calls f with the name and inode of each entry of d, but "."
// and ".."; name is valid only during the call.
func (d Dir) EachEntry(f func(name []byte, ino uint64)) error { return d.d.eachEntry(f) }

// View returns a view of the directory at path, tracked as d: one that
// reads through d's parent when path is d's sibling (as the functions of
// one PCI slot are), else by the full path; a view that reads nothing
// when path is "".
func (d Dir) View(path string) Dir {
	if path == "" {
		return Dir{sysDir{fd: -1}}
	}
	if parent, ok := d.d.ancestor(filepath.Dir(d.d.path)); ok && filepath.Dir(path) == parent.path {
		return Dir{parent.sub(filepath.Base(path))}
	}
	return Dir{sysDir{fd: unix.AT_FDCWD, rel: path + "/", path: path, tr: d.d.tr}}
}

// Exists reports whether the directory d views exists.
func (d Dir) Exists() bool {
	var st unix.Stat_t
	return unix.Fstatat(d.d.fd, strings.TrimSuffix(d.d.rel, "/"), &st, 0) == nil
}
