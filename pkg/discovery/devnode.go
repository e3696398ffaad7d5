package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// devNode reads a device's dev attribute and names its /dev node.
func (w *walker) devNode(d sysDir) (DevNode, error) {
	name := filepath.Base(d.path)
	mm, err := d.read("dev")
	if err != nil {
		return DevNode{}, err
	}
	major, minor, err := ParseMajorMinor(mm)
	if err != nil {
		return DevNode{}, fmt.Errorf("read %s/dev: %w", d.path, err)
	}
	if err := OwnsNumber(w.root, d.path, major, minor); err != nil {
		return DevNode{}, fmt.Errorf("%s/dev: %w", d.path, err)
	}
	return DevNode{
		Name:      name,
		SysfsPath: d.path,
		Path:      "/dev/" + name,
		HostPath:  filepath.Join(w.root, "dev", name),
		Major:     major,
		Minor:     minor,
	}, nil
}

// OwnsNumber checks that the character device number major:minor is the
// device whose sysfs directory is dir, as /sys/dev/char/<major:minor>, the
// kernel's link from a number to its device, says: a dev attribute (or a
// /dev node) naming another device's number, another card's FME or port,
// must never make that device's node one a container gets.
func OwnsNumber(root, dir string, major, minor uint32) error {
	owner, err := CharDevOwner(root, major, minor)
	if err != nil {
		return err
	}
	if owner != dir {
		return fmt.Errorf("number %d:%d is not this device's but %s's (sys/dev/char/%d:%d)", major, minor, owner, major, minor)
	}
	return nil
}

// CharDevOwner returns the sysfs directory, below root, of the device
// that has the character device number major:minor.
func CharDevOwner(root string, major, minor uint32) (string, error) {
	link := filepath.Join(root, "sys/dev/char", fmt.Sprintf("%d:%d", major, minor))
	target, err := readlinkAt(unix.AT_FDCWD, link)
	if err != nil {
		return "", fmt.Errorf("number %d:%d belongs to no device: %w", major, minor, err)
	}
	if filepath.IsAbs(target) {
		return filepath.Join(root, target), nil
	}
	return filepath.Join(filepath.Dir(link), target), nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	var buf [1024]byte
	n, err := unix.Readlinkat(dirfd, name, buf[:])
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// ParseMajorMinor parses a dev attribute ("241:0").
func ParseMajorMinor(s string) (uint32, uint32, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("dev %q is not major:minor", s)
	}
	major, err := strconv.ParseUint(a, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("dev %q: major: %w", s, err)
	}
	minor, err := strconv.ParseUint(b, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("dev %q: minor: %w", s, err)
	}
	return uint32(major), uint32(minor), nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// StatNode describes the character device at path (as a container sees
// it, "/dev/xclmgmt3") below root.
func StatNode(root, path string) (DevNode, error) {
	host := filepath.Join(root, path)
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		return DevNode{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return DevNode{}, fmt.Errorf("%s is not a character device", path)
	}
	return DevNode{Name: filepath.Base(path), Path: path, HostPath: host, Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}, nil
}
