package discovery

import (
	"path/filepath"
	"strings"
)

// DriverLink is a device link in a PCI driver's directory.
type DriverLink struct {
	// Key is the link, as the directory lists it.
	Key DirKey
	// Dir is the device's sysfs directory below the root.
	Dir string
}

// Links holds the targets of directory links by entry, so that a rescan
// does not read a link again while its entry stays.
type Links map[DirKey]string

// DriverLinks lists the device links of a PCI driver's directory dir
// (relative to root), by BDF, each resolved to the device's sysfs
// directory below root. Links old holds are not read again; every link is
// noted in next.
func DriverLinks(root, dir string, old, next Links) (map[string]DriverLink, error) {
	full := filepath.Join(root, dir)
	d, err := openSysDir(full)
	if err != nil {
		return nil, err
	}
	defer d.close()
	entries, err := d.entries()
	if err != nil {
		return nil, err
	}
	out := map[string]DriverLink{}
	for _, e := range entries {
		if !strings.Contains(e.name, ":") {
			continue // bind, unbind, module, new_id ...
		}
		key := DirKey{path: full + "/" + e.name, ino: e.ino}
		target, ok := old[key]
		if !ok {
			if target, err = readlinkAt(d.fd, e.name); err != nil {
				continue // not a link, or gone since the listing
			}
		}
		next[key] = target
		l := DriverLink{Key: key, Dir: filepath.Join(full, target)}
		if filepath.IsAbs(target) {
			l.Dir = filepath.Join(root, target)
		}
		out[e.name] = l
	}
	return out, nil
}
