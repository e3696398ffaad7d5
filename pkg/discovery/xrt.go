package discovery

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The XRT family: AMD/Xilinx Alveo cards. A card is two PCI functions: the
// user PF, bound to xocl, which a workload uses (one device per card), and
// the management PF, bound to xclmgmt, which can flash the shell and never
// reaches a container; it is read for health only.
//
//	sys/bus/pci/drivers/xocl/<user BDF>    -> the user PF's sysfs directory
//	sys/bus/pci/drivers/xclmgmt/<mgmt BDF> -> the management PF's
//	<user PF>/user_pf, vendor, device, numa_node, interface_uuids,
//	   logic_uuids, xclbinuuid, ready, dev_offline, rom.u.*/{VBNV,timestamp},
//	   xmc.u.*/serial_num, drm/renderD<N>/dev
//	<mgmt PF>/mgmt_pf, instance, dev_offline
//	/dev/dri/renderD<N>, /dev/xfpga/*.u<instance>.*, /dev/xclmgmt<instance>
//
// The user PF's instance is domain*65536 + bus*256 + device*8 + function.
const (
	xrtUserDriverDir = "sys/bus/pci/drivers/xocl"
	xrtMgmtDriverDir = "sys/bus/pci/drivers/xclmgmt"
)

// xrtModels names the common Alveo cards by the vendor:device of their
// user PF.
var xrtModels = map[string]string{
	"0x10ee:0x5001": "AMD Alveo U200",
	"0x10ee:0x5005": "AMD Alveo U250",
	"0x10ee:0x500d": "AMD Alveo U280",
	"0x10ee:0x5021": "AMD Alveo U50",
	"0x10ee:0x505d": "AMD Alveo U55C",
	"0x1d0f:0x1042": "AWS EC2 F1 (Xilinx VU9P)",
}

// xrtFamily implements family for XRT.
type xrtFamily struct{}

func (xrtFamily) driver() KernelDriver { return DriverXRT }

// models implements family.
func (xrtFamily) models() map[string]string { return xrtModels }

// present implements family: xocl is loaded.
func (xrtFamily) present(root string) bool { return isDir(filepath.Join(root, xrtUserDriverDir)) }

// xrtCard is where one card's functions live.
type xrtCard struct {
	bdf, user, mgmt string
	xfpga           []string // /dev/xfpga entries of the user PF's instance
}

// scan implements family.
func (f xrtFamily) scan(ctx context.Context, s *Scanner, res *Result) error {
	users, err := driverLinks(s.Root, xrtUserDriverDir)
	if err != nil {
		return fmt.Errorf("read the xocl driver directory: %w", err)
	}
	mgmts, _ := driverLinks(s.Root, xrtMgmtDriverDir) // a VM may have no management PF
	mgmtBySlot := map[string]string{}
	for bdf, dir := range mgmts {
		mgmtBySlot[pciSlot(bdf)] = dir
	}
	xfpga := xfpgaNodes(s.Root)
	var cards []xrtCard
	for _, bdf := range slices.Sorted(maps.Keys(users)) {
		inst, err := pciInstance(bdf)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("xocl device %s: %w", bdf, err))
			continue
		}
		cards = append(cards, xrtCard{bdf: bdf, user: users[bdf], mgmt: mgmtBySlot[pciSlot(bdf)], xfpga: xfpga[inst]})
	}
	timeout := s.readTimeout()
	stuck := s.stuckCards()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	stall := func(c xrtCard, r stuckRead) {
		if old := last[c.user]; old != nil {
			res.Cards = append(res.Cards, stalled(old, r, timeout))
			return
		}
		res.Errors = append(res.Errors, timedOut(c.bdf, r.attr, timeout))
	}
	var todo []xrtCard
	for _, c := range cards {
		if r, ok := stuck[c.user]; ok {
			stall(c, r)
			continue
		}
		todo = append(todo, c)
	}
	type read struct {
		card *Card
		err  error
	}
	trackers := make([]*tracker, len(todo))
	for k := range trackers {
		trackers[k] = &tracker{}
	}
	returned := make([]atomic.Bool, len(todo))
	results, done, _ := boundedMap(ctx, len(todo), timeout,
		func(k int) read {
			c, err := f.read(s.Root, todo[k], trackers[k])
			return read{c, err}
		},
		func(k int, _ read) {
			returned[k].Store(true)
			s.setStuck(todo[k].user, stuckRead{}, false)
		})
	if ctx.Err() != nil {
		return nil
	}
	for k, c := range todo {
		switch {
		case done[k] && results[k].err != nil:
			res.Errors = append(res.Errors, results[k].err)
		case done[k]:
			res.Cards = append(res.Cards, results[k].card)
		default:
			r := stuckRead{attr: trackers[k].current(), since: time.Now()}
			s.setStuck(c.user, r, true)
			if returned[k].Load() {
				s.setStuck(c.user, stuckRead{}, false)
			}
			stall(c, r)
		}
	}
	return nil
}

// read reads one card: its fixed fields, then (check) what can change.
func (f xrtFamily) read(root string, x xrtCard, tr *tracker) (*Card, error) {
	d, err := openSysDir(x.user)
	if err != nil {
		return nil, fmt.Errorf("card %s: %w", x.bdf, err)
	}
	defer d.close()
	d = d.tracked(tr)
	if _, err := d.read("user_pf"); err != nil {
		return nil, fmt.Errorf("card %s: xocl is bound but it is no user PF: %w", x.bdf, err)
	}
	c := &Card{Driver: DriverXRT, PCIAddress: x.bdf, PCIPath: x.user, NUMANode: -1, SocketID: -1, PortsNum: 1, mgmtPath: x.mgmt}
	c.VendorID, _ = d.read("vendor")
	c.DeviceID, _ = d.read("device")
	if v, err := d.read("numa_node"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			c.NUMANode = n
		}
	}
	c.Model = modelName(xrtModels, c.VendorID, c.DeviceID)
	render, err := f.renderNode(root, d)
	if err != nil {
		return nil, fmt.Errorf("card %s: %w", x.bdf, err)
	}
	p := &Port{Node: render, PCIAddress: x.bdf, PCIPath: x.user, AFUIDFile: x.user + "/xclbinuuid"}
	for _, name := range x.xfpga {
		node, err := statNode(root, "/dev/xfpga/"+name)
		if err != nil {
			continue // gone since the listing; the next scan sees it
		}
		p.ExtraNodes = append(p.ExtraNodes, node)
	}
	c.Ports = []*Port{p}
	var platform, timestamp, serial string
	if names, err := d.names(); err == nil {
		sort.Strings(names)
		for _, n := range names {
			switch {
			case strings.HasPrefix(n, "rom.") && platform == "":
				platform, _ = d.read(n + "/VBNV")
				timestamp, _ = d.read(n + "/timestamp")
			case strings.HasPrefix(n, "xmc.") && serial == "":
				serial, _ = d.read(n + "/serial_num")
			}
		}
	}
	if x.mgmt != "" {
		if m, err := openSysDir(x.mgmt); err == nil {
			m = m.tracked(tr)
			if inst, err := m.read("instance"); err == nil {
				if node, err := statNode(root, "/dev/xclmgmt"+inst); err == nil {
					c.Management = append(c.Management, node)
				}
			}
			m.close()
		}
	}
	for _, a := range []struct{ name, value string }{{"platform", platform}, {"shellTimestamp", timestamp}, {"serial", serial}} {
		if a.value != "" && len(a.value) <= 64 { // an attribute string holds 64 bytes
			c.Attributes = append(c.Attributes, Attribute{Name: a.name, Value: a.value})
		}
	}
	if logic, err := d.read("logic_uuids"); err == nil {
		if id, err := CanonicalID(firstLine(logic)); err == nil {
			c.Attributes = append(c.Attributes, Attribute{Name: "logicUUID", Value: id})
		}
	}
	if platform != "" && timestamp != "" {
		c.Legacy = Legacy{Resource: "amd.com/" + platform + "-" + timestamp, DeviceID: x.bdf}
	}
	xrtCheck(c, p, d)
	return c, nil
}

// renderNode finds the user PF's DRM render node (drm/renderD<N>).
func (xrtFamily) renderNode(root string, d sysDir) (DevNode, error) {
	names, err := d.sub("drm").names()
	if err != nil {
		return DevNode{}, fmt.Errorf("no DRM render node: %w", err)
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasPrefix(n, "renderD") {
			continue
		}
		mm, err := d.read("drm/" + n + "/dev")
		if err != nil {
			return DevNode{}, err
		}
		major, minor, err := parseMajorMinor(mm)
		if err != nil {
			return DevNode{}, fmt.Errorf("render node %s: %w", n, err)
		}
		return DevNode{Name: n, SysfsPath: d.path, Path: "/dev/dri/" + n, HostPath: filepath.Join(root, "dev/dri", n), Major: major, Minor: minor}, nil
	}
	return DevNode{}, fmt.Errorf("no DRM render node below %s/drm: is the xocl driver fully loaded?", d.path)
}

// refresh implements family: the IDs, status and device nodes again.
func (xrtFamily) refresh(oc *Card, tr *tracker) (*Card, bool) {
	c := *oc
	op := *oc.Ports[0]
	c.Ports = []*Port{&op}
	d, err := openSysDir(c.PCIPath)
	if err != nil {
		op.AFUID = ""
		op.Health = Health{}
		op.Health.fail("card-gone", "user PF of card %s is gone: %v", c.PCIAddress, err)
	} else {
		xrtCheck(&c, &op, d.tracked(tr))
		d.close()
	}
	changed := c.InterfaceID != oc.InterfaceID || op.AFUID != oc.Ports[0].AFUID || op.Health.String() != oc.Ports[0].Health.String()
	return &c, changed
}

// xrtCheck reads what changes without a hot-plug event (interface UUIDs,
// loaded xclbin, status) through the user PF's open directory d, and
// checks the card's health.
func xrtCheck(c *Card, p *Port, d sysDir) {
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
	c.Attributes = slices.DeleteFunc(c.Attributes, func(a Attribute) bool { return strings.HasPrefix(a.Name, "interfaceID") })
	for i, id := range c.InterfaceIDs[min(1, len(c.InterfaceIDs)):] {
		c.Attributes = append(c.Attributes, Attribute{Name: fmt.Sprintf("interfaceID%d", i+2), Value: id})
	}
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
	if v, err := d.read("ready"); err != nil || (v != "0x1" && v != "1") {
		h.fail("xrt-not-ready", "card %s is not ready (ready is %q, %v): its management side does not answer", c.PCIAddress, v, err)
	}
	if v, err := d.read("dev_offline"); err == nil && v != "0" && v != "0x0" {
		h.fail("offline", "card %s is offline (dev_offline %s): it is being reset or reflashed", c.PCIAddress, v)
	}
	for _, n := range p.Nodes() {
		checkNode(&h, n)
	}
	if c.mgmtPath != "" {
		if m, err := openSysDir(c.mgmtPath); err != nil {
			h.fail("mgmt-gone", "management PF of card %s is gone: %v", c.PCIAddress, err)
		} else {
			m.tr = d.tr
			if v, err := m.read("dev_offline"); err == nil && v != "0" && v != "0x0" {
				h.fail("mgmt-offline", "management PF of card %s is offline (dev_offline %s)", c.PCIAddress, v)
			}
			m.close()
		}
	}
	p.Health = h
}

// allZero is the ID of nothing.
const allZero = "00000000000000000000000000000000"

// driverLinks lists a PCI driver directory's device links, by BDF, each
// resolved to the device's sysfs directory below root.
func driverLinks(root, dir string) (map[string]string, error) {
	full := filepath.Join(root, dir)
	entries, err := os.ReadDir(full)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.Contains(e.Name(), ":") || e.Type()&os.ModeSymlink == 0 {
			continue // bind, unbind, module, new_id ...
		}
		target, err := os.Readlink(filepath.Join(full, e.Name()))
		if err != nil {
			continue
		}
		if filepath.IsAbs(target) {
			out[e.Name()] = filepath.Join(root, target)
		} else {
			out[e.Name()] = filepath.Join(full, target)
		}
	}
	return out, nil
}

// xfpgaNodes lists /dev/xfpga below root by the user PF instance each
// entry belongs to ("dma.qdma.u<instance>.0").
func xfpgaNodes(root string) map[int][]string {
	entries, err := os.ReadDir(filepath.Join(root, "dev/xfpga"))
	if err != nil {
		return nil
	}
	out := map[int][]string{}
	for _, e := range entries {
		for _, part := range strings.Split(e.Name(), ".") {
			if n, ok := strings.CutPrefix(part, "u"); ok {
				if inst, err := strconv.Atoi(n); err == nil {
					out[inst] = append(out[inst], e.Name())
				}
			}
		}
	}
	return out
}

// statNode describes the character device at path (as a container sees
// it) below root.
func statNode(root, path string) (DevNode, error) {
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
	var domain, bus, dev, fn int
	if _, err := fmt.Sscanf(bdf, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		return 0, fmt.Errorf("%q is not a PCI address (domain:bus:device.function): %w", bdf, err)
	}
	return domain*65536 + bus*256 + dev*8 + fn, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
