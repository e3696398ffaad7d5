package discovery

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// cardHealth reads what makes every port of a card unhealthy: an all-f
// interface ID, the FME's error registers and a critical temperature (its
// threshold is read into c once). The bool is false when the card has an
// hwmon directory whose temperature could not be read.
func (l layout) cardHealth(c *Card, fme sysDir) (Health, bool) {
	h := Health{Healthy: true}
	if c.InterfaceID == AllF {
		h.Fail("interface-id-all-f", "interface ID of card %s is all-f: the PR region is unusable", c.PCIAddress)
	}
	for _, name := range l.fmeErrors {
		if v := errorValue(fme, "errors/"+name); v != 0 {
			h.Fail(fmt.Sprintf("fme-%s-0x%x", name, v), "FME %s of card %s is 0x%x", name, c.PCIAddress, v)
		}
	}
	hwmonOK := true
	if c.hwmon != "" {
		t, ok := millidegrees(fme, c.hwmon+"/temp1_input")
		if ok && c.tempCrit == 0 {
			c.tempCrit, ok = millidegrees(fme, c.hwmon+"/temp1_crit")
			ok = ok && c.tempCrit > 0
			if !ok {
				c.tempCrit = 0
			}
		}
		if ok && t >= c.tempCrit {
			h.Fail("overheat", "card %s is at %d°C, at or above its critical %d°C", c.PCIAddress, t/1000, c.tempCrit/1000)
		}
		hwmonOK = ok
	}
	return h, hwmonOK
}

// millidegrees reads an hwmon temperature attribute (millidegrees Celsius),
// through fme's open directory when it lies below.
func millidegrees(fme sysDir, path string) (int64, bool) {
	s, err := fme.readPath(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// check fills in a port's AFU ID and health from the attributes that change
// without a hot-plug event, adding the card's own problems. prev is the
// port's AFU ID from an earlier pass: while a port is being reprogrammed the
// kernel answers EBUSY for afu_id, and the earlier value stands.
func (l layout) check(c *Card, card Health, p *Port, prev string, tr *Tracker) {
	d, err := openSysDir(p.Node.SysfsPath)
	if err != nil {
		p.AFUID = ""
		p.Health = Health{}
		p.Health.Fail("port-gone", "port %s is gone: %v", p.Node.Name, err)
		return
	}
	defer d.close()
	l.checkIn(d.tracked(tr), c, card, p, prev)
}

// checkIn is check on the port's open sysfs directory.
func (l layout) checkIn(d sysDir, c *Card, card Health, p *Port, prev string) {
	p.Health = Health{Healthy: true}
	afu, err := d.readID("afu_id")
	switch {
	case errors.Is(err, syscall.EBUSY):
		p.AFUID = prev
	case err != nil:
		p.AFUID = ""
		p.Health.Fail("afu_id-unreadable", "afu_id unreadable: %v", err)
	default:
		p.AFUID = afu
		if afu == AllF {
			p.Health.Fail("afu_id-all-f", "afu_id is all-f: the accelerator function is unusable")
		}
	}
	CheckNode(&p.Health, p.Node)
	if v := errorValue(d, "errors/errors"); v != 0 {
		p.Health.Fail(fmt.Sprintf("port-errors-0x%x", v), "port errors register is 0x%x", v)
	}
	p.Health.add(card)
}

// CheckNode verifies a device node exists below the root as a character
// device with the numbers sysfs reports.
func CheckNode(h *Health, n DevNode) {
	var st unix.Stat_t
	if err := unix.Stat(n.HostPath, &st); err != nil {
		h.Fail("device-node-missing", "device node %s: %v", n.Path, err)
		return
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		h.Fail("device-node-not-char", "device node %s is not a character device", n.Path)
		return
	}
	if maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev); maj != n.Major || min != n.Minor {
		h.Fail("device-node-mismatch", "device node %s is %d:%d, sysfs says %d:%d", n.Path, maj, min, n.Major, n.Minor)
	}
}

// errorValue reads an error register such as "0x0"; a missing or
// malformed attribute reads as zero (older kernels lack some of them).
func errorValue(d sysDir, name string) uint64 {
	s, err := d.read(name)
	if err != nil {
		return 0
	}
	v, err := RegisterValue(s)
	if err != nil {
		return 0
	}
	return v
}

// RegisterValue parses a register as drivers print it in sysfs:
// hexadecimal, with or without a "0x" prefix in either case ("0x4", "0X4",
// "4"). A decimal flag ("0", "1") reads as the same value.
func RegisterValue(s string) (uint64, error) {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		s = s[2:]
	}
	return strconv.ParseUint(s, 16, 64)
}

// Refresh implements Family: Refresh for one card, noting its reads in tr.
func (l layout) Refresh(oc *Card, tr *Tracker) (*Card, bool) {
	c := *oc
	c.Ports = make([]*Port, len(oc.Ports))
	var card Health
	if fme, err := openSysDir(c.FME.SysfsPath); err != nil {
		card.Fail("fme-gone", "FME of card %s is gone: %v", c.PCIAddress, err)
	} else {
		fme = fme.tracked(tr)
		id, err := fme.readIDPath(c.interfaceIDFile)
		if err == nil {
			c.InterfaceID, c.InterfaceIDs = id, []string{id}
		}
		card, _ = l.cardHealth(&c, fme)
		// While the region is reprogrammed the kernel answers EBUSY and
		// the earlier ID stands; otherwise a card whose interface ID
		// cannot be read has no usable region.
		if err != nil && !errors.Is(err, syscall.EBUSY) {
			card.Fail("interface-id-unreadable", "interface ID of card %s unreadable: %v", c.PCIAddress, err)
		}
		fme.close()
	}
	changed := c.InterfaceID != oc.InterfaceID
	for i, op := range oc.Ports {
		p := *op
		l.check(&c, card, &p, op.AFUID, tr)
		if p.AFUID != op.AFUID || p.Health.String() != op.Health.String() {
			changed = true
		}
		c.Ports[i] = &p
	}
	return &c, changed
}
