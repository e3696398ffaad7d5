package discovery

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// sysDir is an open sysfs directory whose attributes are read relative to
// it with openat: a full discovery pass opens each device directory once
// instead of resolving a deep path for every attribute.
type sysDir struct {
	fd   int
	path string
}

func openSysDir(path string) (sysDir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return sysDir{fd: -1}, fmt.Errorf("open %s: %w", path, err)
	}
	return sysDir{fd: fd, path: path}, nil
}

func (d sysDir) close() {
	if d.fd >= 0 {
		_ = unix.Close(d.fd)
	}
}

// names lists the directory's entries (unsorted, without . and ..).
func (d sysDir) names() ([]string, error) {
	var buf [8192]byte
	var names []string
	for {
		n, err := unix.Getdents(d.fd, buf[:])
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", d.path, err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// read returns an attribute's content with surrounding white space removed.
func (d sysDir) read(name string) (string, error) {
	s, err := readAttrAt(d.fd, name)
	if err != nil {
		return "", fmt.Errorf("read %s/%s: %w", d.path, name, err)
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
