package xrt

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
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
	userDriverDir = "sys/bus/pci/drivers/xocl"
	mgmtDriverDir = "sys/bus/pci/drivers/xclmgmt"
)

// models names the common Alveo cards by the vendor:device of their
// user PF.
var models = map[string]string{
	"0x10ee:0x5001": "AMD Alveo U200",
	"0x10ee:0x5005": "AMD Alveo U250",
	"0x10ee:0x500d": "AMD Alveo U280",
	"0x10ee:0x5021": "AMD Alveo U50",
	"0x10ee:0x505d": "AMD Alveo U55C",
	"0x1d0f:0x1042": "AWS EC2 F1 (Xilinx VU9P)",
}

// Family is the XRT card family: it implements discovery.Family and,
// loading xclbins through XRT's tool, program.Family.
type Family struct{}

// Driver implements discovery.Family.
func (Family) Driver() discovery.KernelDriver { return discovery.DriverXRT }

// Models implements discovery.Family.
func (Family) Models() map[string]string { return models }

// Present implements discovery.Family: xocl is loaded.
func (Family) Present(root string) bool {
	fi, err := os.Stat(filepath.Join(root, userDriverDir))
	return err == nil && fi.IsDir()
}

// card is where one card's functions live.
type card struct {
	bdf, user, mgmt string
	// userKey and mgmtKey are the functions' links in the drivers'
	// directories (mgmtKey is zero without a management PF).
	userKey, mgmtKey discovery.DirKey
	xfpga            []string // /dev/xfpga entries of the user PF's instance
}

// static is what a card shows that does not change while its user PF
// stays bound to xocl and its management PF to xclmgmt: read once per
// binding (a rebind makes new driver links). Values are never modified
// once stored in a memo.
type static struct {
	mgmtKey discovery.DirKey
	// card holds the PCI IDs, NUMA node, model, shell attributes (platform,
	// shellTimestamp, serial, logicUUID), legacy name and management node;
	// its interface IDs and ports are unset.
	card   discovery.Card
	render discovery.DevNode
}

// memo is what a Scan remembers for the next: the drivers' links and
// the cards' fixed fields by their user PF's link.
type memo struct {
	links  discovery.Links
	static map[discovery.DirKey]*static
}

// Scan implements discovery.Family.
func (f Family) Scan(ctx context.Context, s *discovery.Scanner, res *discovery.Result) error {
	old, _ := s.Remembered(discovery.DriverXRT).(*memo)
	if old == nil {
		old = &memo{}
	}
	next := &memo{links: discovery.Links{}, static: map[discovery.DirKey]*static{}}
	users, err := discovery.DriverLinks(s.Root, userDriverDir, old.links, next.links)
	if err != nil {
		return fmt.Errorf("read the xocl driver directory: %w", err)
	}
	mgmts, _ := discovery.DriverLinks(s.Root, mgmtDriverDir, old.links, next.links) // a VM may have no management PF
	mgmtBySlot := map[string]discovery.DriverLink{}
	for bdf, l := range mgmts {
		mgmtBySlot[pciSlot(bdf)] = l
	}
	xfpga := xfpgaNodes(s.Root)
	var cards []card
	var dirs []discovery.CardDir
	for _, bdf := range slices.Sorted(maps.Keys(users)) {
		inst, err := pciInstance(bdf)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("xocl device %s: %w", bdf, err))
			continue
		}
		m := mgmtBySlot[pciSlot(bdf)]
		cards = append(cards, card{bdf: bdf, user: users[bdf].Dir, userKey: users[bdf].Key, mgmt: m.Dir, mgmtKey: m.Key, xfpga: xfpga[inst]})
		dirs = append(dirs, discovery.CardDir{PCIAddress: bdf, PCIPath: users[bdf].Dir})
	}
	statics := make([]*static, len(cards))
	done := s.ReadCards(ctx, dirs, func(k int, tr *discovery.Tracker) (*discovery.Card, error) {
		st := old.static[cards[k].userKey]
		if st != nil && st.mgmtKey != cards[k].mgmtKey {
			st = nil // the management PF was rebound (or came, or went)
		}
		c, st, err := f.read(s.Root, cards[k], st, tr)
		statics[k] = st
		return c, err
	}, res)
	if done == nil {
		return nil // ctx ended
	}
	for k, c := range cards {
		st := old.static[c.userKey] // kept while a read of the card is stuck
		if done[k] {
			st = statics[k]
		}
		if st != nil {
			next.static[c.userKey] = st
		}
	}
	s.Remember(discovery.DriverXRT, next)
	return nil
}

// read reads one card through its user PF's open directory: its fixed
// fields unless st has them, then (check) what can change. It returns
// the card and, when every fixed field was there, those fields for the
// next scan.
func (f Family) read(root string, x card, st *static, tr *discovery.Tracker) (*discovery.Card, *static, error) {
	d, err := discovery.OpenDir(x.user)
	if err != nil {
		return nil, nil, fmt.Errorf("card %s: %w", x.bdf, err)
	}
	defer d.Close()
	d = d.Tracked(tr)
	mgmt := d.View(x.mgmt)
	keep := st
	if st == nil {
		var complete bool
		if st, complete, err = f.readStatic(root, x, d, mgmt); err != nil {
			return nil, nil, fmt.Errorf("card %s: %w", x.bdf, err)
		}
		if complete {
			keep = st
		}
	}
	c := st.card
	c.PCIAddress, c.PCIPath, c.ManagementPath = x.bdf, x.user, x.mgmt
	c.Attributes = slices.Clone(st.card.Attributes)
	p := &discovery.Port{Node: st.render, PCIAddress: x.bdf, PCIPath: x.user, AFUIDFile: x.user + "/xclbinuuid"}
	for _, name := range x.xfpga {
		node, err := discovery.StatNode(root, "/dev/xfpga/"+name)
		if err != nil {
			continue // gone since the listing; the next scan sees it
		}
		// The name says whose node it is; its number says whose it is
		// (a symlink to, or a copy of, a management node is not the
		// user PF's).
		owner, err := discovery.CharDevOwner(root, node.Major, node.Minor)
		if err == nil && !strings.HasPrefix(owner, x.user+"/") {
			err = fmt.Errorf("its number %d:%d is %s's, not the user PF's", node.Major, node.Minor, owner)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("card %s: user node %s: %w", x.bdf, node.Path, err)
		}
		p.ExtraNodes = append(p.ExtraNodes, node)
	}
	c.Ports = []*discovery.Port{p}
	check(&c, p, d, mgmt)
	return &c, keep, nil
}

// readStatic reads the fields of a card that do not change while its
// functions stay bound (see static), and reports whether every one of
// them was there; mgmt views the management PF's directory.
func (f Family) readStatic(root string, x card, d, mgmt discovery.Dir) (*static, bool, error) {
	// The user PF's listing (some sixty entries) says whether it is one
	// and names the shell's ROM and the card's management controller (the
	// first of each, as XRT numbers them).
	var userPF bool
	var romDir, xmcDir string
	err := d.EachEntry(func(name []byte, _ uint64) {
		switch {
		case string(name) == "user_pf":
			userPF = true
		case bytes.HasPrefix(name, []byte("rom.")) && (romDir == "" || string(name) < romDir):
			romDir = string(name)
		case bytes.HasPrefix(name, []byte("xmc.")) && (xmcDir == "" || string(name) < xmcDir):
			xmcDir = string(name)
		}
	})
	if err != nil {
		return nil, false, err
	}
	if !userPF {
		return nil, false, fmt.Errorf("xocl is bound but it is no user PF: %s has no user_pf", d.Path())
	}
	st := &static{mgmtKey: x.mgmtKey}
	c := &st.card
	c.Driver, c.NUMANode, c.SocketID, c.PortsNum = discovery.DriverXRT, -1, -1, 1
	complete := true
	read := func(d discovery.Dir, name string) string {
		v, err := d.Read(name)
		complete = complete && err == nil
		return v
	}
	c.VendorID, c.DeviceID = read(d, "vendor"), read(d, "device")
	if v, err := d.Read("numa_node"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			c.NUMANode = n
		}
	}
	c.Model = discovery.LookupModel(models, c.VendorID, c.DeviceID)
	if st.render, err = f.renderNode(root, d); err != nil {
		return nil, false, err
	}
	var platform, timestamp, serial string
	if romDir != "" {
		platform, timestamp = read(d, romDir+"/VBNV"), read(d, romDir+"/timestamp")
	}
	if xmcDir != "" {
		serial = read(d, xmcDir+"/serial_num")
	}
	// The shell's ROM may show late in the driver's probe: look again.
	complete = complete && romDir != ""
	if x.mgmt != "" {
		var node discovery.DevNode
		inst, err := mgmt.Read("instance")
		if err == nil {
			if _, err = strconv.ParseUint(inst, 10, 31); err == nil {
				node, err = discovery.StatNode(root, "/dev/xclmgmt"+inst)
			}
		}
		if err == nil {
			c.Management = []discovery.DevNode{node}
		}
		complete = complete && err == nil
	}
	for _, a := range []struct{ name, value string }{{"platform", platform}, {"shellTimestamp", timestamp}, {"serial", serial}} {
		if a.value != "" && len(a.value) <= 64 { // an attribute string holds 64 bytes
			c.Attributes = append(c.Attributes, discovery.Attribute{Name: a.name, Value: a.value})
		}
	}
	if id, err := discovery.CanonicalID(firstLine(read(d, "logic_uuids"))); err == nil {
		c.Attributes = append(c.Attributes, discovery.Attribute{Name: "logicUUID", Value: id})
	}
	if name := platform + "-" + timestamp; platform != "" && timestamp != "" && resourceNamePattern.MatchString(name) && len(name) <= 63 {
		c.Legacy = discovery.Legacy{Resource: "amd.com/" + name, DeviceID: x.bdf}
	}
	return st, complete, nil
}

// resourceNamePattern is the name part of an extended resource name (at
// most 63 characters): a VBNV that does not fit gives the card no AMD name.
var resourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// renderNode finds the user PF's DRM render node (drm/renderD<N>).
func (Family) renderNode(root string, d discovery.Dir) (discovery.DevNode, error) {
	var n string
	err := d.Sub("drm").EachEntry(func(name []byte, _ uint64) {
		if bytes.HasPrefix(name, []byte("renderD")) && (n == "" || string(name) < n) {
			n = string(name)
		}
	})
	switch {
	case err != nil:
		return discovery.DevNode{}, fmt.Errorf("no DRM render node: %w", err)
	case n == "":
		return discovery.DevNode{}, fmt.Errorf("no DRM render node below %s/drm: is the xocl driver fully loaded?", d.Path())
	}
	mm, err := d.Read("drm/" + n + "/dev")
	if err != nil {
		return discovery.DevNode{}, err
	}
	major, minor, err := discovery.ParseMajorMinor(mm)
	if err != nil {
		return discovery.DevNode{}, fmt.Errorf("render node %s: %w", n, err)
	}
	if err := discovery.OwnsNumber(root, d.Path()+"/drm/"+n, major, minor); err != nil {
		return discovery.DevNode{}, fmt.Errorf("render node %s: %w", n, err)
	}
	return discovery.DevNode{Name: n, SysfsPath: d.Path(), Path: "/dev/dri/" + n, HostPath: filepath.Join(root, "dev/dri", n), Major: major, Minor: minor}, nil
}

// xfpgaNodes lists /dev/xfpga below root by the user PF instance each
// entry belongs to ("dma.qdma.u<instance>.0").
func xfpgaNodes(root string) map[int][]string {
	d, err := discovery.OpenDir(filepath.Join(root, "dev/xfpga"))
	if err != nil {
		return nil
	}
	defer d.Close()
	out := map[int][]string{}
	_ = d.EachEntry(func(name []byte, _ uint64) {
		if inst, ok := xfpgaInstance(name); ok {
			out[inst] = append(out[inst], string(name))
		}
	})
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
