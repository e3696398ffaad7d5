package xrt

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Refresh implements discovery.Family: the IDs, status and device nodes again.
func (Family) Refresh(oc *discovery.Card, tr *discovery.Tracker) (*discovery.Card, bool) {
	c := *oc
	op := *oc.Ports[0]
	c.Ports = []*discovery.Port{&op}
	d, err := discovery.OpenDir(c.PCIPath)
	if err != nil {
		op.AFUID = ""
		op.Health = discovery.Health{}
		op.Health.Fail("card-gone", "user PF of card %s is gone: %v", c.PCIAddress, err)
	} else {
		d = d.Tracked(tr)
		check(&c, &op, d, d.View(c.ManagementPath))
		d.Close()
	}
	changed := !slices.Equal(c.InterfaceIDs, oc.InterfaceIDs) || op.AFUID != oc.Ports[0].AFUID || op.Health.String() != oc.Ports[0].Health.String()
	return &c, changed
}

// check reads what changes without a hot-plug event (interface UUIDs,
// loaded xclbin, status) through the user PF's open directory d and the
// management PF's view mgmt (see discovery.Dir.View), and checks the card's health.
// It replaces c's interface IDs and Attributes, never changing the slices
// c had (a refreshed card's are its predecessor's).
func check(c *discovery.Card, p *discovery.Port, d, mgmt discovery.Dir) {
	h := discovery.Health{Healthy: true}
	c.InterfaceID, c.InterfaceIDs = "", nil
	switch v, err := d.Read("interface_uuids"); {
	case err != nil:
		h.Fail("interface-id-unreadable", "interface_uuids of card %s unreadable: %v: is the shell loaded?", c.PCIAddress, err)
	default:
		for _, line := range strings.Fields(v) {
			id, err := discovery.CanonicalID(line)
			if err != nil {
				h.Fail("interface-id-malformed", "interface_uuids of card %s: %v", c.PCIAddress, err)
				continue
			}
			c.InterfaceIDs = append(c.InterfaceIDs, id)
		}
		switch {
		case len(c.InterfaceIDs) == 0 && len(h.Reasons) == 0:
			h.Fail("interface-id-missing", "interface_uuids of card %s is empty: the shell reports no interface", c.PCIAddress)
		case len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] == discovery.AllF:
			h.Fail("interface-id-all-f", "interface UUID of card %s is all-f: the shell is unusable", c.PCIAddress)
		case len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] == discovery.AllZero:
			h.Fail("interface-id-all-zero", "interface UUID of card %s is all-zero: the shell is unusable", c.PCIAddress)
		}
	}
	if len(c.InterfaceIDs) > 0 && c.InterfaceIDs[0] != discovery.AllF && c.InterfaceIDs[0] != discovery.AllZero {
		c.InterfaceID = c.InterfaceIDs[0]
	}
	attrs := make([]discovery.Attribute, 0, len(c.Attributes)+len(c.InterfaceIDs))
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
		for i, id := range ids[:min(discovery.MaxInterfaceIDs-1, len(ids))] {
			attrs = append(attrs, discovery.Attribute{Name: fmt.Sprintf("interfaceID%d", i+2), Value: id})
		}
	}
	c.Attributes = attrs
	p.AFUID = ""
	switch v, err := d.Read("xclbinuuid"); {
	case err != nil:
		h.Fail("xclbinuuid-unreadable", "xclbinuuid of card %s unreadable: %v", c.PCIAddress, err)
	case v != "":
		if id, err := discovery.CanonicalID(v); err != nil {
			h.Fail("xclbinuuid-malformed", "xclbinuuid of card %s: %v", c.PCIAddress, err)
		} else if id != discovery.AllZero {
			p.AFUID = id
		}
	}
	if v, err := d.Read("ready"); err != nil || !flagSet(v) {
		h.Fail("xrt-not-ready", "card %s is not ready (ready is %q, %v): its management side does not answer", c.PCIAddress, v, err)
	}
	if v, err := d.Read("dev_offline"); err == nil && !flagClear(v) {
		h.Fail("offline", "card %s is offline (dev_offline %s): it is being reset or reflashed", c.PCIAddress, v)
	}
	for _, n := range p.Nodes() {
		discovery.CheckNode(&h, n)
	}
	if c.ManagementPath != "" {
		switch v, err := mgmt.Read("dev_offline"); {
		case err == nil && !flagClear(v):
			h.Fail("mgmt-offline", "management PF of card %s is offline (dev_offline %s)", c.PCIAddress, v)
		case err != nil && errors.Is(err, unix.ENOENT) && !mgmt.Exists():
			h.Fail("mgmt-gone", "management PF of card %s is gone: %s does not exist", c.PCIAddress, mgmt.Path())
		}
	}
	p.Health = h
}

// flagSet reports whether a status flag such as xocl's ready reads 1
// ("1", "0x1", "0X1"); flagClear whether it reads 0. A malformed value is
// neither: the card is not taken to be ready, nor to be online.
func flagSet(v string) bool {
	n, err := discovery.RegisterValue(v)
	return err == nil && n == 1
}

func flagClear(v string) bool {
	n, err := discovery.RegisterValue(v)
	return err == nil && n == 0
}
