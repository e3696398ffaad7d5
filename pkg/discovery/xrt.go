package discovery

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
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

// xrtFamily implements Family for XRT.
type xrtFamily struct{}

func (xrtFamily) Driver() KernelDriver { return DriverXRT }

// Models implements Family.
func (xrtFamily) Models() map[string]string { return xrtModels }

// Present implements Family: xocl is loaded.
func (xrtFamily) Present(root string) bool { return isDir(filepath.Join(root, xrtUserDriverDir)) }

// xrtCard is where one card's functions live.
type xrtCard struct {
	bdf, user, mgmt string
	// userKey and mgmtKey are the functions' links in the drivers'
	// directories (mgmtKey is zero without a management PF).
	userKey, mgmtKey dirKey
	xfpga            []string // /dev/xfpga entries of the user PF's instance
}

// xrtStatic is what a card shows that does not change while its user PF
// stays bound to xocl and its management PF to xclmgmt: read once per
// binding (a rebind makes new driver links). Values are never modified
// once stored in a known.
type xrtStatic struct {
	mgmtKey dirKey
	// card holds the PCI IDs, NUMA node, model, shell attributes (platform,
	// shellTimestamp, serial, logicUUID), legacy name and management node;
	// its interface IDs and ports are unset.
	card   Card
	render DevNode
}

// Scan implements Family.
func (f xrtFamily) Scan(ctx context.Context, s *Scanner, res *Result) error {
	old := s.knownOf(DriverXRT)
	next := &known{links: map[dirKey]string{}, alveo: map[dirKey]*xrtStatic{}}
	users, err := driverLinks(s.Root, xrtUserDriverDir, old, next)
	if err != nil {
		return fmt.Errorf("read the xocl driver directory: %w", err)
	}
	mgmts, _ := driverLinks(s.Root, xrtMgmtDriverDir, old, next) // a VM may have no management PF
	mgmtBySlot := map[string]driverLink{}
	for bdf, l := range mgmts {
		mgmtBySlot[pciSlot(bdf)] = l
	}
	xfpga := xfpgaNodes(s.Root)
	var cards []xrtCard
	for _, bdf := range slices.Sorted(maps.Keys(users)) {
		inst, err := pciInstance(bdf)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("xocl device %s: %w", bdf, err))
			continue
		}
		m := mgmtBySlot[pciSlot(bdf)]
		cards = append(cards, xrtCard{bdf: bdf, user: users[bdf].dir, userKey: users[bdf].key, mgmt: m.dir, mgmtKey: m.key, xfpga: xfpga[inst]})
	}
	timeout := s.readTimeout()
	stuck := s.stuckCards()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	stall := func(c xrtCard, r stuckRead) {
		if st := old.alveo[c.userKey]; st != nil {
			next.alveo[c.userKey] = st
		}
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
		card   *Card
		static *xrtStatic
		err    error
	}
	trackers := make([]*Tracker, len(todo))
	for k := range trackers {
		trackers[k] = &Tracker{}
	}
	returned := make([]atomic.Bool, len(todo))
	results, done, _ := boundedMap(ctx, len(todo), timeout,
		func(k int) read {
			st := old.alveo[todo[k].userKey]
			if st != nil && st.mgmtKey != todo[k].mgmtKey {
				st = nil // the management PF was rebound (or came, or went)
			}
			c, st, err := f.read(s.Root, todo[k], st, trackers[k])
			return read{c, st, err}
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
			if st := results[k].static; st != nil {
				next.alveo[c.userKey] = st
			}
		default:
			r := stuckRead{attr: trackers[k].current(), since: time.Now()}
			s.setStuck(c.user, r, true)
			if returned[k].Load() {
				s.setStuck(c.user, stuckRead{}, false)
			}
			stall(c, r)
		}
	}
	s.setKnown(DriverXRT, next)
	return nil
}

// read reads one card through its user PF's open directory: its fixed
// fields unless st has them, then (xrtCheck) what can change. It returns
// the card and, when every fixed field was there, those fields for the
// next scan.
func (f xrtFamily) read(root string, x xrtCard, st *xrtStatic, tr *Tracker) (*Card, *xrtStatic, error) {
	d, err := openSysDir(x.user)
	if err != nil {
		return nil, nil, fmt.Errorf("card %s: %w", x.bdf, err)
	}
	defer d.close()
	d = d.tracked(tr)
	mgmt := mgmtView(d, x.mgmt)
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
	c.PCIAddress, c.PCIPath, c.mgmtPath = x.bdf, x.user, x.mgmt
	c.Attributes = slices.Clone(st.card.Attributes)
	p := &Port{Node: st.render, PCIAddress: x.bdf, PCIPath: x.user, AFUIDFile: x.user + "/xclbinuuid"}
	for _, name := range x.xfpga {
		node, err := statNode(root, "/dev/xfpga/"+name)
		if err != nil {
			continue // gone since the listing; the next scan sees it
		}
		// The name says whose node it is; its number says whose it is
		// (a symlink to, or a copy of, a management node is not the
		// user PF's).
		owner, err := charDevOwner(root, node.Major, node.Minor)
		if err == nil && !strings.HasPrefix(owner, x.user+"/") {
			err = fmt.Errorf("its number %d:%d is %s's, not the user PF's", node.Major, node.Minor, owner)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("card %s: user node %s: %w", x.bdf, node.Path, err)
		}
		p.ExtraNodes = append(p.ExtraNodes, node)
	}
	c.Ports = []*Port{p}
	xrtCheck(&c, p, d, mgmt)
	return &c, keep, nil
}

// readStatic reads the fields of a card that do not change while its
// functions stay bound (see xrtStatic), and reports whether every one of
// them was there; mgmt views the management PF's directory.
func (f xrtFamily) readStatic(root string, x xrtCard, d, mgmt sysDir) (*xrtStatic, bool, error) {
	// The user PF's listing (some sixty entries) says whether it is one
	// and names the shell's ROM and the card's management controller (the
	// first of each, as XRT numbers them).
	var userPF bool
	var romDir, xmcDir string
	err := d.eachEntry(func(name []byte, _ uint64) {
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
		return nil, false, fmt.Errorf("xocl is bound but it is no user PF: %s has no user_pf", d.path)
	}
	st := &xrtStatic{mgmtKey: x.mgmtKey}
	c := &st.card
	c.Driver, c.NUMANode, c.SocketID, c.PortsNum = DriverXRT, -1, -1, 1
	complete := true
	read := func(d sysDir, name string) string {
		v, err := d.read(name)
		complete = complete && err == nil
		return v
	}
	c.VendorID, c.DeviceID = read(d, "vendor"), read(d, "device")
	if v, err := d.read("numa_node"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			c.NUMANode = n
		}
	}
	c.Model = modelName(xrtModels, c.VendorID, c.DeviceID)
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
		var node DevNode
		inst, err := mgmt.read("instance")
		if err == nil {
			if _, err = strconv.ParseUint(inst, 10, 31); err == nil {
				node, err = statNode(root, "/dev/xclmgmt"+inst)
			}
		}
		if err == nil {
			c.Management = []DevNode{node}
		}
		complete = complete && err == nil
	}
	for _, a := range []struct{ name, value string }{{"platform", platform}, {"shellTimestamp", timestamp}, {"serial", serial}} {
		if a.value != "" && len(a.value) <= 64 { // an attribute string holds 64 bytes
			c.Attributes = append(c.Attributes, Attribute{Name: a.name, Value: a.value})
		}
	}
	if id, err := CanonicalID(firstLine(read(d, "logic_uuids"))); err == nil {
		c.Attributes = append(c.Attributes, Attribute{Name: "logicUUID", Value: id})
	}
	if name := platform + "-" + timestamp; platform != "" && timestamp != "" && resourceNamePattern.MatchString(name) && len(name) <= 63 {
		c.Legacy = Legacy{Resource: "amd.com/" + name, DeviceID: x.bdf}
	}
	return st, complete, nil
}

// resourceNamePattern is the name part of an extended resource name (at
// most 63 characters): a VBNV that does not fit gives the card no AMD name.
var resourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// mgmtView returns a view of the management PF's directory mgmtPath that
// reads through the user PF's open directory d when the two functions are
// siblings (functions of one PCI slot are), else a view that reads by the
// full path; the zero view when the card has no management PF.
func mgmtView(d sysDir, mgmtPath string) sysDir {
	if mgmtPath == "" {
		return sysDir{fd: -1}
	}
	if parent, ok := d.ancestor(filepath.Dir(d.path)); ok && filepath.Dir(mgmtPath) == parent.path {
		return parent.sub(filepath.Base(mgmtPath))
	}
	return sysDir{fd: unix.AT_FDCWD, rel: mgmtPath + "/", path: mgmtPath, tr: d.tr}
}

// renderNode finds the user PF's DRM render node (drm/renderD<N>).
func (xrtFamily) renderNode(root string, d sysDir) (DevNode, error) {
	var n string
	err := d.sub("drm").eachEntry(func(name []byte, _ uint64) {
		if bytes.HasPrefix(name, []byte("renderD")) && (n == "" || string(name) < n) {
			n = string(name)
		}
	})
	switch {
	case err != nil:
		return DevNode{}, fmt.Errorf("no DRM render node: %w", err)
	case n == "":
		return DevNode{}, fmt.Errorf("no DRM render node below %s/drm: is the xocl driver fully loaded?", d.path)
	}
	mm, err := d.read("drm/" + n + "/dev")
	if err != nil {
		return DevNode{}, err
	}
	major, minor, err := parseMajorMinor(mm)
	if err != nil {
		return DevNode{}, fmt.Errorf("render node %s: %w", n, err)
	}
	if err := ownsNumber(root, d.path+"/drm/"+n, major, minor); err != nil {
		return DevNode{}, fmt.Errorf("render node %s: %w", n, err)
	}
	return DevNode{Name: n, SysfsPath: d.path, Path: "/dev/dri/" + n, HostPath: filepath.Join(root, "dev/dri", n), Major: major, Minor: minor}, nil
}

// driverLink is a device link in a PCI driver's directory.
type driverLink struct {
	key dirKey // the link, as the directory lists it
	dir string // the device's sysfs directory below the root
}

// driverLinks lists a PCI driver directory's device links, by BDF, each
// resolved to the device's sysfs directory below root. Link targets old
// knows are not read again; every link is noted in next.
func driverLinks(root, dir string, old, next *known) (map[string]driverLink, error) {
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
	out := map[string]driverLink{}
	for _, e := range entries {
		if !strings.Contains(e.name, ":") {
			continue // bind, unbind, module, new_id ...
		}
		key := dirKey{path: full + "/" + e.name, ino: e.ino}
		target, ok := old.links[key]
		if !ok {
			if target, err = readlinkAt(d.fd, e.name); err != nil {
				continue // not a link, or gone since the listing
			}
		}
		next.links[key] = target
		l := driverLink{key: key, dir: filepath.Join(full, target)}
		if filepath.IsAbs(target) {
			l.dir = filepath.Join(root, target)
		}
		out[e.name] = l
	}
	return out, nil
}

// xfpgaNodes lists /dev/xfpga below root by the user PF instance each
// entry belongs to ("dma.qdma.u<instance>.0").
func xfpgaNodes(root string) map[int][]string {
	d, err := openSysDir(filepath.Join(root, "dev/xfpga"))
	if err != nil {
		return nil
	}
	defer d.close()
	out := map[int][]string{}
	_ = d.eachEntry(func(name []byte, _ uint64) {
		if inst, ok := xfpgaInstance(name); ok {
			out[inst] = append(out[inst], string(name))
		}
	})
	for _, names := range out {
		slices.Sort(names)
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

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}
