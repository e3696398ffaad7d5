package discovery

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// known is what a scan of one family learned that stays true while a
// device exists.
type known struct {
	links map[dirKey]string      // class or driver directory entry -> link target
	cards map[dirKey]*cardStatic // FME directory -> the card's fixed fields
	ports map[dirKey]*portStatic // port directory -> the port's fixed fields
	// alveo: xocl driver link of a user PF -> the Alveo card's fixed
	// fields (XRT).
	alveo map[dirKey]*xrtStatic
}

// dirKey identifies a directory entry across scans.
type dirKey struct {
	path string
	ino  uint64
}

// cardStatic holds a card's fixed fields; Ports and InterfaceID are unset.
// Values are never modified once stored in a known.
type cardStatic struct {
	card Card
	// interfaceIDFile is the layout's interface-ID attribute, found when
	// the class directory listed no PR region for the card.
	interfaceIDFile string
}

// portStatic holds a port's fixed fields.
type portStatic struct {
	node DevNode
	id   int
}

type walker struct {
	ctx  context.Context
	sc   *Scanner
	root string
	l    layout
	// old is read by the workers and never written; next is written only
	// by walk, before and after the workers run.
	old, next *known
}

// cardPlan is what the listing pass learns about one card before any
// attribute is read, and what reading it produced.
type cardPlan struct {
	pciPath string
	// fme views the FME directory through its card's open directory; its
	// path is "" until found (findFME locates it for VF-only cards).
	fme    sysDir
	fmeKey dirKey
	// interfaceIDFiles are the PR regions' compat_id files (DFL) found in
	// the class directory.
	interfaceIDFiles []string
	ports            []portPlan
	// owned are the listings whose open directories the plan reads
	// through; tr notes what its reads are at.
	owned []int
	tr    *tracker
	// stalled is, when the card's read is stuck, the card as last seen
	// with its ports unhealthy (err says why when it was never seen).
	stalled *Card

	card       *Card
	static     *cardStatic
	cardHealth Health
	err        error
	portErrs   []error
}

type portPlan struct {
	dir     sysDir
	key     dirKey
	pciPath string
	vf      bool
	static  *portStatic
}

// listing is what the listing pass learned about one class directory entry.
type listing struct {
	key    dirKey
	target string // the link target
	err    error  // the entry is unusable; nothing else is set
	// prCompatID is set for a DFL PR region (below its FME:
	// .../dfl-fme.0/dfl-fme-region.1/fpga_region/region1): its compat_id,
	// the card's interface ID. fmeDir is that FME's directory.
	prCompatID, fmeDir string
	// d is the open card-level directory, with its FME and port children;
	// d.fd is -1 for a PR region or a directory with neither.
	d       sysDir
	fme     *dirEntry
	ports   []dirEntry
	pciPath string
	// physfn is the physical function of a card-level directory that has
	// ports but no FME: an SR-IOV virtual function (physfnErr when its
	// physfn link cannot be read).
	physfn    string
	physfnErr error
}

// walk lists the class directory, then each card-level directory and reads
// each card's attributes through the card-level directory it keeps open;
// both passes run on all cores, as opening files dominates the cost.
func (w *walker) walk(res *Result) error {
	classDir := filepath.Join(w.root, w.l.classDir)
	cd, err := openSysDir(classDir)
	if err != nil {
		return fmt.Errorf("read %s class directory: %w", w.l.driver_, err)
	}
	defer cd.close()
	entries, err := cd.entries()
	if err != nil {
		return fmt.Errorf("read %s class directory: %w", w.l.driver_, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	listed := make([]listing, len(entries))
	// Listings read by a card whose read was abandoned are closed by that
	// read once it returns (see readBounded).
	handedOver := make([]bool, len(entries))
	defer func() {
		for i, l := range listed {
			if !handedOver[i] {
				l.d.close()
			}
		}
	}()
	parallel(len(entries), func(i int) { listed[i] = w.list(cd, classDir, entries[i]) })

	plans := map[string]*cardPlan{}
	var order []*cardPlan
	plan := func(pciPath string) *cardPlan {
		if p, ok := plans[pciPath]; ok {
			return p
		}
		p := &cardPlan{pciPath: pciPath}
		plans[pciPath] = p
		order = append(order, p)
		return p
	}
	prRegions := map[string][]string{} // FME dir -> compat_id files
	for li, l := range listed {
		if l.err != nil {
			res.Errors = append(res.Errors, l.err)
			continue
		}
		w.next.links[l.key] = l.target
		if l.prCompatID != "" {
			prRegions[l.fmeDir] = append(prRegions[l.fmeDir], l.prCompatID)
			continue
		}
		if l.fme == nil && len(l.ports) == 0 {
			continue // a PR-region directory, not a card
		}
		owner := l.pciPath
		if l.fme == nil && l.physfnErr == nil {
			owner = l.physfn
		}
		if p := plans[owner]; p != nil || l.fme != nil || l.physfnErr == nil {
			p = plan(owner)
			p.owned = append(p.owned, li)
		}
		if l.fme != nil {
			p := plan(l.pciPath)
			p.fme = l.d.sub(l.fme.name)
			p.fmeKey = dirKey{path: p.fme.path, ino: l.fme.ino}
		}
		for _, c := range l.ports {
			pp := portPlan{dir: l.d.sub(c.name), pciPath: l.pciPath}
			pp.key = dirKey{path: pp.dir.path, ino: c.ino}
			switch {
			case l.fme != nil:
				p := plan(l.pciPath)
				p.ports = append(p.ports, pp)
			case l.physfnErr != nil:
				res.Errors = append(res.Errors, fmt.Errorf("port %s: no FME in %s and no physfn link to a physical function", pp.dir.path, l.d.path))
			default:
				pp.vf = true
				pf := plan(l.physfn)
				pf.ports = append(pf.ports, pp)
			}
		}
	}
	for _, p := range order {
		p.interfaceIDFiles = prRegions[p.fme.path]
		p.tr = &tracker{}
		p.fme = p.fme.tracked(p.tr)
		for i := range p.ports {
			p.ports[i].dir = p.ports[i].dir.tracked(p.tr)
		}
	}
	w.readBounded(order, listed, handedOver)
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("discovery stopped: %w", context.Cause(w.ctx))
	}
	for _, p := range order {
		if p.stalled != nil {
			res.Cards = append(res.Cards, p.stalled)
			continue
		}
		if p.static != nil && p.fmeKey.ino != 0 {
			w.next.cards[p.fmeKey] = p.static
		}
		for _, pp := range p.ports {
			if pp.static != nil {
				w.next.ports[pp.key] = pp.static
			}
		}
		if p.err != nil {
			res.Errors = append(res.Errors, p.err)
			continue
		}
		res.Errors = append(res.Errors, p.portErrs...)
		res.Cards = append(res.Cards, p.card)
	}
	sort.Slice(res.Cards, func(i, j int) bool { return res.Cards[i].PCIAddress < res.Cards[j].PCIAddress })
	return nil
}

// readBounded reads every plan's card (see read), each within the
// scanner's read timeout. A plan whose read outlasts it, or whose card's
// read is still stuck from an earlier pass, is not waited for: it gets
// stalled (or err, for a card never seen), and the listings it reads
// through are handed over to its read, which closes them and clears the
// card's stuck mark once it returns.
func (w *walker) readBounded(order []*cardPlan, listed []listing, handedOver []bool) {
	timeout := w.sc.readTimeout()
	stuck := w.sc.stuckCards()
	w.sc.mu.Lock()
	last := w.sc.last
	w.sc.mu.Unlock()
	stall := func(p *cardPlan, r stuckRead) {
		if c := last[p.pciPath]; c != nil {
			p.stalled = stalled(c, r, timeout)
			return
		}
		p.err = timedOut(filepath.Base(p.pciPath), r.attr, timeout)
	}
	var todo []int
	for i, p := range order {
		if r, ok := stuck[p.pciPath]; ok {
			stall(p, r)
			continue
		}
		todo = append(todo, i)
	}
	returned := make([]atomic.Bool, len(todo))
	results, done, left := boundedMap(w.ctx, len(todo), timeout,
		func(k int) cardPlan {
			q := *order[todo[k]]
			q.ports = slices.Clone(q.ports)
			w.read(&q)
			return q
		},
		func(k int, q cardPlan) {
			for _, li := range q.owned {
				listed[li].d.close()
			}
			returned[k].Store(true)
			w.sc.setStuck(q.pciPath, stuckRead{}, false)
		})
	for k, i := range todo {
		p := order[i]
		switch {
		case done[k]:
			*p = results[k]
			continue
		case left[k]:
			for _, li := range p.owned {
				handedOver[li] = true
			}
		}
		if w.ctx.Err() != nil {
			continue // the pass is discarded
		}
		r := stuckRead{attr: p.tr.current(), since: time.Now()}
		w.sc.setStuck(p.pciPath, r, true)
		if returned[k].Load() {
			// It returned meanwhile: it may have cleared the mark first.
			w.sc.setStuck(p.pciPath, stuckRead{}, false)
		}
		stall(p, r)
	}
}

// list resolves one class directory entry and lists the card-level
// directory it points to. It reads w.old only.
func (w *walker) list(cd sysDir, classDir string, e dirEntry) listing {
	l := listing{key: dirKey{path: classDir + "/" + e.name, ino: e.ino}, d: sysDir{fd: -1}}
	target, ok := w.old.links[l.key]
	if !ok {
		var err error
		if target, err = readlinkAt(cd.fd, e.name); err != nil {
			l.err = fmt.Errorf("resolve %s/%s: %w", classDir, e.name, err)
			return l
		}
	}
	l.target = target
	dir := filepath.Join(classDir, target)
	if filepath.IsAbs(target) {
		dir = filepath.Join(w.root, target)
	}
	// A DFL PR region lives below its FME. It is not a card, and its
	// compat_id is the card's interface ID.
	if i := strings.Index(dir, "/dfl-fme-region."); i >= 0 {
		l.fmeDir, l.prCompatID = dir[:i], filepath.Join(dir, "compat_id")
		return l
	}
	d, err := openSysDir(dir)
	if err != nil {
		l.err = err
		return l
	}
	children, err := d.entries()
	if err != nil {
		d.close()
		l.err = err
		return l
	}
	sort.Slice(children, func(i, j int) bool { return children[i].name < children[j].name })
	for i, c := range children {
		switch {
		case strings.HasPrefix(c.name, w.l.fmePrefix):
			l.fme = &children[i]
		case strings.HasPrefix(c.name, w.l.portPrefix):
			l.ports = append(l.ports, c)
		}
	}
	if l.fme == nil && len(l.ports) == 0 {
		d.close()
		return l
	}
	l.d = d
	// <pci function>/fpga_region/regionN or <pci function>/fpga/intel-fpga-dev.N
	l.pciPath = filepath.Dir(filepath.Dir(dir))
	if l.fme == nil {
		// A port with no FME beside it sits on an SR-IOV virtual
		// function; the FME is on the physical function.
		physfn, err := readlinkAt(unix.AT_FDCWD, filepath.Join(l.pciPath, "physfn"))
		l.physfn, l.physfnErr = filepath.Join(l.pciPath, physfn), err
	}
	return l
}

// parallel calls f(0) ... f(n-1) on as many goroutines as the process may
// run at once, and returns when every call has.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

func (w *walker) read(p *cardPlan) {
	p.card, p.cardHealth, p.err = w.readCard(p)
	if p.err != nil {
		return
	}
	card := p.cardHealth
	for i := range p.ports {
		port, err := w.readPort(&p.ports[i], p.card, card)
		if err != nil {
			p.portErrs = append(p.portErrs, err)
			continue
		}
		p.card.Ports = append(p.card.Ports, port)
	}
	sort.Slice(p.card.Ports, func(i, j int) bool {
		a, b := p.card.Ports[i], p.card.Ports[j]
		if a.PCIAddress != b.PCIAddress {
			return a.PCIAddress < b.PCIAddress
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Node.Name < b.Node.Name
	})
	// Two ports of one function with one id would be one device name: the
	// API server refuses a slice that has a name twice.
	kept := p.card.Ports[:0]
	for _, port := range p.card.Ports {
		if k := len(kept); k > 0 && kept[k-1].PCIAddress == port.PCIAddress && kept[k-1].ID == port.ID {
			p.portErrs = append(p.portErrs, fmt.Errorf("port %s: id %d on %s is %s's too: both would be device %s", port.Node.SysfsPath, port.ID, port.PCIAddress, kept[k-1].Node.Name, port.DeviceName()))
			continue
		}
		kept = append(kept, port)
	}
	p.card.Ports = kept
	intelAttributes(p.card)
}

// readCard reads a card's fixed fields unless an earlier scan knows them,
// then its interface ID and health.
func (w *walker) readCard(p *cardPlan) (*Card, Health, error) {
	addr := filepath.Base(p.pciPath)
	fme := p.fme
	if fme.path == "" {
		dir, err := w.findFME(p.pciPath)
		if err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
		if fme, err = openSysDir(dir); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
		defer fme.close()
	}
	st, known := w.old.cards[p.fmeKey]
	complete := known
	if !known || p.fmeKey.ino == 0 {
		var err error
		if st, complete, err = w.readCardStatic(p, fme); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
	}
	file := st.interfaceIDFile
	if len(p.interfaceIDFiles) > 0 {
		file = p.interfaceIDFiles[0]
	} else if file == "" {
		var err error
		if file, err = w.l.interfaceIDPath(fme.path); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: interface ID: %w", addr, err)
		}
		found := *st
		found.interfaceIDFile = file
		st = &found
	}
	c := st.card
	id, err := fme.readIDPath(file)
	if err != nil {
		return nil, Health{}, fmt.Errorf("card %s: interface ID: %w", addr, err)
	}
	c.InterfaceID, c.interfaceIDFile = id, file
	health, hwmonOK := w.l.cardHealth(&c, fme)
	// What a card's driver had not yet created (it adds hwmon and some
	// attributes late in its probe) or has moved (a rebind renames hwmonN)
	// is looked for again by the next scan.
	if complete && hwmonOK {
		if st.card.tempCrit != c.tempCrit {
			learned := *st
			learned.card.tempCrit = c.tempCrit
			st = &learned
		}
		p.static = st
	}
	return &c, health, nil
}

// readCardStatic reads the fields of a card that do not change while its
// FME exists, and reports whether every one of them was there.
func (w *walker) readCardStatic(p *cardPlan, fme sysDir) (*cardStatic, bool, error) {
	c := Card{Driver: w.l.driver_, PCIAddress: filepath.Base(p.pciPath), PCIPath: p.pciPath, NUMANode: -1}
	var err error
	if c.FME, err = w.devNode(fme); err != nil {
		return nil, false, err
	}
	complete := true
	read := func(name string) string {
		v, err := fme.read(name)
		complete = complete && err == nil
		return v
	}
	c.SocketID = -1
	if n, err := strconv.Atoi(read("socket_id")); err == nil {
		c.SocketID = n
	}
	c.PortsNum, _ = strconv.Atoi(read("ports_num"))
	c.BitstreamID = read("bitstream_id")
	if names, err := fme.sub("hwmon").names(); err == nil && len(names) > 0 {
		sort.Strings(names)
		c.hwmon = fme.path + "/hwmon/" + names[0]
	} else {
		complete = false
	}
	// The FME sits below its PCI function: read the PCI attributes through
	// the directory already open.
	pci, ok := fme.ancestor(p.pciPath)
	if !ok {
		return &cardStatic{card: c}, false, nil
	}
	c.VendorID, _ = pci.read("vendor")
	c.DeviceID, _ = pci.read("device")
	if v, err := pci.read("numa_node"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			c.NUMANode = n
		}
	}
	return &cardStatic{card: c}, complete, nil
}

// findFME locates the FME below a physical function's PCI directory, for a
// VF port whose PF is not listed in the class directory.
func (w *walker) findFME(pciPath string) (string, error) {
	parent := filepath.Join(pciPath, w.l.pciChild)
	dirs, err := os.ReadDir(parent)
	if err != nil {
		return "", fmt.Errorf("find FME: %w", err)
	}
	for _, d := range dirs {
		children, err := os.ReadDir(filepath.Join(parent, d.Name()))
		if err != nil {
			continue
		}
		for _, c := range children {
			if strings.HasPrefix(c.Name(), w.l.fmePrefix) {
				return filepath.Join(parent, d.Name(), c.Name()), nil
			}
		}
	}
	return "", fmt.Errorf("no %s* below %s", w.l.fmePrefix, parent)
}

// readPort reads a port's fixed fields unless an earlier scan knows them,
// then its AFU ID and health.
func (w *walker) readPort(pp *portPlan, c *Card, card Health) (*Port, error) {
	st, ok := w.old.ports[pp.key]
	if !ok {
		node, err := w.devNode(pp.dir)
		if err != nil {
			return nil, fmt.Errorf("port %s: %w", pp.dir.path, err)
		}
		v, err := pp.dir.read("id")
		if err != nil {
			return nil, fmt.Errorf("port %s: %w", pp.dir.path, err)
		}
		id, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("port %s: id %q is not a number", pp.dir.path, v)
		}
		st = &portStatic{node: node, id: id}
	}
	pp.static = st
	p := &Port{
		Node:            st.node,
		ID:              st.id,
		PCIAddress:      filepath.Base(pp.pciPath),
		PCIPath:         pp.pciPath,
		VirtualFunction: pp.vf,
	}
	w.l.checkIn(pp.dir, c, card, p, "")
	return p, nil
}

// devNode reads a device's dev attribute and names its /dev node.
func (w *walker) devNode(d sysDir) (DevNode, error) {
	name := filepath.Base(d.path)
	mm, err := d.read("dev")
	if err != nil {
		return DevNode{}, err
	}
	major, minor, err := parseMajorMinor(mm)
	if err != nil {
		return DevNode{}, fmt.Errorf("read %s/dev: %w", d.path, err)
	}
	if err := ownsNumber(w.root, d.path, major, minor); err != nil {
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

// ownsNumber checks that the character device number major:minor is the
// device whose sysfs directory is dir, as /sys/dev/char/<major:minor>, the
// kernel's link from a number to its device, says: a dev attribute (or a
// /dev node) naming another device's number, another card's FME or port,
// must never make that device's node one a container gets.
func ownsNumber(root, dir string, major, minor uint32) error {
	owner, err := charDevOwner(root, major, minor)
	if err != nil {
		return err
	}
	if owner != dir {
		return fmt.Errorf("number %d:%d is not this device's but %s's (sys/dev/char/%d:%d)", major, minor, owner, major, minor)
	}
	return nil
}

// charDevOwner returns the sysfs directory, below root, of the device
// that has the character device number major:minor.
func charDevOwner(root string, major, minor uint32) (string, error) {
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

func parseMajorMinor(s string) (uint32, uint32, error) {
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
