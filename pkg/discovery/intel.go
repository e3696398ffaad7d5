package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// layout is what differs between the DFL and OPAE sysfs trees; the walk
// itself is shared.
type layout struct {
	driver_ KernelDriver
	// classDir lists one link per card-level directory, relative to the root.
	classDir string
	// pciChild is the directory below a PCI function that holds the
	// card-level directories ("fpga_region" / "fpga").
	pciChild string
	// fmePrefix and portPrefix name the FME and port children of such a
	// directory ("dfl-fme." / "dfl-port.").
	fmePrefix, portPrefix string
	// fmeErrors are the FME error attributes (below errors/) that make every
	// port of the card unhealthy when non-zero.
	fmeErrors []string
	// interfaceIDPath returns the attribute holding the PR interface ID of
	// the FME at fmeDir.
	interfaceIDPath func(fmeDir string) (string, error)
}

var dflLayout = layout{
	driver_:    DriverDFL,
	classDir:   "sys/class/fpga_region",
	pciChild:   "fpga_region",
	fmeErrors:  []string{"fme_errors", "catfatal_errors"},
	fmePrefix:  "dfl-fme.",
	portPrefix: "dfl-port.",
	// region0/dfl-fme.0/dfl-fme-region.N/fpga_region/regionM/compat_id
	interfaceIDPath: func(fmeDir string) (string, error) {
		entries, err := os.ReadDir(fmeDir)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "dfl-fme-region.") {
				continue
			}
			regions := filepath.Join(fmeDir, e.Name(), "fpga_region")
			rs, err := os.ReadDir(regions)
			if err != nil {
				continue
			}
			for _, r := range rs {
				p := filepath.Join(regions, r.Name(), "compat_id")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
		}
		return "", fmt.Errorf("no dfl-fme-region.*/fpga_region/region*/compat_id below %s: load the dfl_fme_mgr, dfl_fme_br and dfl_fme_region modules", fmeDir)
	},
}

var opaeLayout = layout{
	driver_:    DriverOPAE,
	classDir:   "sys/class/fpga",
	pciChild:   "fpga",
	fmeErrors:  []string{"errors", "catfatal_errors"},
	fmePrefix:  "intel-fpga-fme.",
	portPrefix: "intel-fpga-port.",
	interfaceIDPath: func(fmeDir string) (string, error) {
		return filepath.Join(fmeDir, "pr", "interface_id"), nil
	},
}

// Driver implements Family.
func (l layout) Driver() KernelDriver { return l.driver_ }

// Present implements Family: the layout's class directory exists. The
// OPAE driver's class directory wins over the DFL one: a node runs one of
// the two.
func (l layout) Present(root string) bool {
	if l.driver_ == DriverDFL && isDir(filepath.Join(root, opaeLayout.classDir)) {
		return false
	}
	return isDir(filepath.Join(root, l.classDir))
}

// Scan implements Family: the walk (intel_walk.go).
func (l layout) Scan(ctx context.Context, s *Scanner, res *Result) error {
	w := walker{ctx: ctx, sc: s, root: s.Root, l: l, old: s.knownOf(l.driver_), next: &known{
		links: map[DirKey]string{},
		cards: map[DirKey]*cardStatic{},
		ports: map[DirKey]*portStatic{},
	}}
	if err := w.walk(res); err != nil {
		return err
	}
	s.Remember(l.driver_, w.next)
	return nil
}

// ManagementName implements Family: an FME node ("dfl-fme.0",
// "intel-fpga-fme.0").
func (l layout) ManagementName(path string) bool {
	return strings.HasPrefix(filepath.Base(path), l.fmePrefix)
}

// MatchUevent implements UeventMatcher: a device of the dfl bus, or one
// below a DFL or OPAE device (".../dfl-port.0", ".../intel-fpga-port.0").
func (l layout) MatchUevent(e Uevent) bool {
	return e.Subsystem == "dfl" || strings.Contains(e.DevPath, "/"+strings.TrimSuffix(l.fmePrefix, "fme."))
}

// Models implements Family.
func (l layout) Models() map[string]string { return intelModels }

// intelModels names the cards the DFL and OPAE PCI drivers bind, by
// vendor:device.
var intelModels = map[string]string{
	"0x8086:0x09c4": "Intel PAC Arria 10 GX",
	"0x8086:0x09c5": "Intel PAC Arria 10 GX (VF)",
	"0x8086:0x0b2b": "Intel PAC D5005",
	"0x8086:0x0b2c": "Intel PAC D5005 (VF)",
	"0x8086:0x0b30": "Intel FPGA PAC N3000",
	"0x8086:0x0b31": "Intel FPGA PAC N3000 (VF)",
	"0x8086:0xbcc0": "Intel Xeon with integrated FPGA (6.x)",
	"0x8086:0xbcc1": "Intel Xeon with integrated FPGA (6.x, VF)",
	"0x8086:0xbcbd": "Intel Xeon with integrated FPGA (5.x)",
	"0x8086:0xbcbf": "Intel Xeon with integrated FPGA (5.x, VF)",
	"0x8086:0xbcce": "Intel DFL FPGA card",
	"0x8086:0xbccf": "Intel DFL FPGA card (VF)",
	"0x1c2c:0x1000": "Silicom FPGA SmartNIC N5010",
	"0x1c2c:0x1001": "Silicom FPGA SmartNIC N5011",
}

// LookupModel returns a readable card name from a family's table, or "vendor:device"
// when the table does not know the card ("" when either is unknown).
func LookupModel(table map[string]string, vendorID, deviceID string) string {
	if vendorID == "" || deviceID == "" {
		return ""
	}
	key := strings.ToLower(vendorID + ":" + deviceID)
	if m, ok := table[key]; ok {
		return m
	}
	return key
}

// intelAttributes fills the Intel family's own attributes of a card and
// its ports: the FME's socket and bitstream, each port's id and whether it
// sits on a virtual function.
func intelAttributes(c *Card) {
	c.Model = LookupModel(intelModels, c.VendorID, c.DeviceID)
	c.Attributes = nil
	if c.SocketID >= 0 {
		c.Attributes = append(c.Attributes, Attribute{Name: "socketID", Value: int64(c.SocketID)})
	}
	if c.BitstreamID != "" {
		c.Attributes = append(c.Attributes, Attribute{Name: "bitstreamID", Value: c.BitstreamID})
	}
	c.InterfaceIDs = []string{c.InterfaceID}
	for _, p := range c.Ports {
		p.Attributes = []Attribute{{Name: "portID", Value: int64(p.ID)}, {Name: "virtualFunction", Value: p.VirtualFunction}}
	}
}
