package xrt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ManagementName implements discovery.Family: a management function's
// /dev/xclmgmt<N>, or one of its /dev/xfpga nodes, which carry
// ".m<instance>" where a user function's carry ".u<instance>".
func (Family) ManagementName(path string) bool {
	base := filepath.Base(path)
	switch {
	case strings.HasPrefix(base, "xclmgmt"):
		return true
	case filepath.Dir(path) != "/dev/xfpga":
		return false
	}
	for part := range strings.SplitSeq(base, ".") {
		if len(part) > 1 && part[0] == 'm' {
			if _, err := strconv.ParseUint(part[1:], 10, 31); err == nil {
				return true
			}
		}
	}
	return false
}

// xfpgaInstance returns the user PF instance an xfpga node's name carries
// in a ".u<instance>" part ("dma.qdma.u257.0"); management nodes carry
// ".m<instance>" instead.
func xfpgaInstance(name []byte) (int, bool) {
	for part := range bytes.SplitSeq(name, []byte(".")) {
		if len(part) > 1 && part[0] == 'u' {
			if inst, err := strconv.ParseUint(string(part[1:]), 10, 31); err == nil {
				return int(inst), true
			}
		}
	}
	return 0, false
}

// pciSlot is a BDF without its function ("0000:3b:00.1" -> "0000:3b:00").
func pciSlot(bdf string) string {
	if i := strings.LastIndexByte(bdf, '.'); i > 0 {
		return bdf[:i]
	}
	return bdf
}

// pciInstance is XRT's instance number of a function:
// domain*65536 + bus*256 + device*8 + function.
func pciInstance(bdf string) (int, error) {
	domain, rest, ok1 := strings.Cut(bdf, ":")
	bus, rest, ok2 := strings.Cut(rest, ":")
	dev, fn, ok3 := strings.Cut(rest, ".")
	var v [4]uint64
	for i, f := range []struct {
		s    string
		bits int
	}{{domain, 16}, {bus, 8}, {dev, 5}, {fn, 3}} {
		var err error
		if v[i], err = strconv.ParseUint(f.s, 16, f.bits); err != nil || !(ok1 && ok2 && ok3) {
			return 0, fmt.Errorf("%q is not a PCI address (domain:bus:device.function, hexadecimal, as 0000:3b:00.1)", bdf)
		}
	}
	return int(v[0]*65536 + v[1]*256 + v[2]*8 + v[3]), nil
}
