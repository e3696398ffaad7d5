package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Refresh implements Family: the IDs, status and device nodes again.
func (xrtFamily) Refresh(oc *Card, tr *Tracker) (*Card, bool) {
	c := *oc
	op := *oc.Ports[0]
	c.Ports = []*Port{&op}
	d, err := openSysDir(c.PCIPath)
	if err != nil {
		op.AFUID = ""
		op.Health = Health{}
		op.Health.fail("card-gone", "user PF of card %s is gone: %v", c.PCIAddress, err)
	} else {
		d = d.tracked(tr)
		xrtCheck(&c, &op, d, mgmtView(d, c.mgmtPath))
		d.close()
	}
	changed := !slices.Equal(c.InterfaceIDs, oc.InterfaceIDs) || op.AFUID != oc.Ports[0].AFUID || op.Health.String() != oc.Ports[0].Health.String()
	return &c, changed
}

// xrtCheck reads what changes without a hot-plug event (interface UUIDs,
// loaded xclbin, status) through the user PF's open directory d and the
// management PF's view mgmt (see mgmtView), and checks the card's health.
// It replaces c's interface IDs and Attributes, never changing the slices
// c had (a refreshed card's are its predecessor's).
func xrtCheck(c *Card, p *Port, d, mgmt sysDir) {
	h := Health{Healthy: true}
	c.InterfaceID, c.InterfaceIDs = "", nil
	switch v, err := d.read("interface_uuids"); {
	case err != nil:
		h.fail("interface-id-unreadable", "interface_uuids of card %s unreadable: %v: is the shell loaded?", c.PCIAddress, err)
	default:
		for _, line := range strings.Fields(v) {
			id, err := CanonicalID(line)
			if err != nil {
				h.fail("interface-id-malformed", "interface_uuids of card %s: %v", c.PCIAddress, err)
				continue
			}
			c.InterfaceIDs = append(c.InterfaceIDs, id)
		}
		switch {
		case len(c.InterfaceIDs) == 0 && len(h.Reasons) == 0:
			h.fail("interface-id-missing", "interface_uuids of card %s is empty: the shell reports no interface", c.PCIAddress)
		case len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] == AllF:
			h.fail("interface-id-all-f", "interface UUID of card %s is all-f: the shell is unusable", c.PCIAddress)
		case len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] == allZero:
			h.fail("interface-id-all-zero", "interface UUID of card %s is all-zero: the shell is unusable", c.PCIAddress)
		}
	}
	if len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] != AllF && c.InterfaceIDs[0] != allZero {
		c.InterfaceID = c.InterfaceIDs[0]
	}
	attrs := make([]Attribute, 0, len(c.Attributes)+len(c.InterfaceIDs))
	for _, a := range c.Attributes {
		if !strings.HasPrefix(a.Name, "interfaceID") {
			attrs = append(attrs, a)
		}
	}
	// The further attributes are the further interfaces the region
	// accepts (Interfaces): an unusable (all-f, all-zero) or repeated
	// entry of the shell's list is none, and must neither make a class
	// select the card nor push a usable one out of the published four.
	if c.InterfaceID != "" {
		ids := c.Interfaces()[1:]
		for i, id := range ids[:min(MaxInterfaceIDs-1, len(ids))] {
			attrs = append(attrs, Attribute{Name: fmt.Sprintf("interfaceID%d", i+2), Value: id})
		}
	}
	c.Attributes = attrs
	p.AFUID = ""
	switch v, err := d.read("xclbinuuid"); {
	case err != nil:
		h.fail("xclbinuuid-unreadable", "xclbinuuid of card %s unreadable: %v", c.PCIAddress, err)
	case v != "":
		if id, err := CanonicalID(v); err != nil {
			h.fail("xclbinuuid-malformed", "xclbinuuid of card %s: %v", c.PCIAddress, err)
		} else if id != allZero {
			p.AFUID = id
		}
	}
	if v, err := d.read("ready"); err != nil || !flagSet(v) {
		h.fail("xrt-not-ready", "card %s is not ready (ready is %q, %v): its management side does not answer", c.PCIAddress, v, err)
	}
	if v, err := d.read("dev_offline"); err == nil && !flagClear(v) {
		h.fail("offline", "card %s is offline (dev_offline %s): it is being reset or reflashed", c.PCIAddress, v)
	}
	for _, n := range p.Nodes() {
		checkNode(&h, n)
	}
	if c.mgmtPath != "" {
		switch v, err := mgmt.read("dev_offline"); {
		case err == nil && !flagClear(v):
			h.fail("mgmt-offline", "management PF of card %s is offline (dev_offline %s)", c.PCIAddress, v)
		case err != nil && errors.Is(err, unix.ENOENT) && !exists(mgmt):
			h.fail("mgmt-gone", "management PF of card %s is gone: %s does not exist", c.PCIAddress, mgmt.path)
		}
	}
	p.Health = h
}

// flagSet reports whether a status flag such as xocl's ready reads 1
// ("1", "0x1", "0X1"); flagClear whether it reads 0. A malformed value is
// neither: the card is not taken to be ready, nor to be online.
func flagSet(v string) bool {
	n, err := registerValue(v)
	return err == nil && n == 1
}

func flagClear(v string) bool {
	n, err := registerValue(v)
	return err == nil && n == 0
}

// exists reports whether the directory d views exists.
func exists(d sysDir) bool {
	var st unix.Stat_t
	return unix.Fstatat(d.fd, strings.TrimSuffix(d.rel, "/"), &st, 0) == nil
}

// allZero is the ID of nothing.
const allZero = "00000000000000000000000000000000"
