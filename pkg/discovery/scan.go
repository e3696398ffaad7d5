package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// layout is what differs between the DFL and OPAE sysfs trees; the walk
// itself is shared.
type layout struct {
	driver KernelDriver
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
	driver:     DriverDFL,
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
	driver:     DriverOPAE,
	classDir:   "sys/class/fpga",
	pciChild:   "fpga",
	fmeErrors:  []string{"errors", "catfatal_errors"},
	fmePrefix:  "intel-fpga-fme.",
	portPrefix: "intel-fpga-port.",
	interfaceIDPath: func(fmeDir string) (string, error) {
		return filepath.Join(fmeDir, "pr", "interface_id"), nil
	},
}

// Scanner discovers cards below a root directory. It is cheap to construct;
// Scan walks the tree and Refresh re-reads only the ID and health attributes
// of an earlier result.
type Scanner struct {
	// Root is the directory that holds sys/ and dev/ ("/" on a host).
	Root string
	// Force selects a kernel driver instead of detecting it; "" detects.
	Force KernelDriver
}

// Detect reports which kernel driver's class directory exists below the
// root: OPAE when sys/class/fpga exists, else DFL when sys/class/fpga_region
// exists, else DriverNone.
func (s *Scanner) Detect() KernelDriver {
	if s.Force != "" {
		return s.Force
	}
	if isDir(filepath.Join(s.Root, opaeLayout.classDir)) {
		return DriverOPAE
	}
	if isDir(filepath.Join(s.Root, dflLayout.classDir)) {
		return DriverDFL
	}
	return DriverNone
}

// Scan walks the tree once. Unusable cards and ports are reported in
// Result.Errors and left out; an error is returned only when the class
// directory of the detected driver cannot be read.
func (s *Scanner) Scan() (*Result, error) {
	res := &Result{Driver: s.Detect()}
	var l layout
	switch res.Driver {
	case DriverNone:
		return res, nil
	case DriverDFL:
		l = dflLayout
	case DriverOPAE:
		l = opaeLayout
	default:
		return nil, fmt.Errorf("kernel driver %q is not dfl, opae or none", res.Driver)
	}
	w := walker{root: s.Root, l: l}
	if err := w.walk(res); err != nil {
		return nil, err
	}
	return res, nil
}

type walker struct {
	root string
	l    layout
}

// cardPlan is what the listing pass learns about one card before any
// attribute is read.
type cardPlan struct {
	pciPath string
	fmeDir  string // "" until found; findFME locates it for VF-only cards
	// interfaceIDFiles are the PR regions' compat_id files (DFL) found in
	// the class directory.
	interfaceIDFiles []string
	ports            []portPlan
	card             *Card
	cardHealth       Health
	err              error
	portErrs         []error
}

type portPlan struct {
	dir, pciPath string
	vf           bool
}

// walk lists the class directory and every card-level directory once
// (sequential, a few system calls per card), then reads each card's
// attributes in parallel: opening attribute files dominates the cost.
func (w *walker) walk(res *Result) error {
	classDir := filepath.Join(w.root, w.l.classDir)
	cd, err := openSysDir(classDir)
	if err != nil {
		return fmt.Errorf("read %s class directory: %w", w.l.driver, err)
	}
	defer cd.close()
	names, err := cd.names()
	if err != nil {
		return fmt.Errorf("read %s class directory: %w", w.l.driver, err)
	}
	sort.Strings(names)
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
	for _, name := range names {
		target, err := readlinkAt(cd.fd, name)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("resolve %s/%s: %w", classDir, name, err))
			continue
		}
		dir := filepath.Join(classDir, target)
		if filepath.IsAbs(target) {
			dir = filepath.Join(w.root, target)
		}
		// A DFL PR region lives below its FME:
		// .../dfl-fme.0/dfl-fme-region.1/fpga_region/region1. It is not a
		// card, and its compat_id is the card's interface ID.
		if i := strings.Index(dir, "/dfl-fme-region."); i >= 0 {
			prRegions[dir[:i]] = append(prRegions[dir[:i]], filepath.Join(dir, "compat_id"))
			continue
		}
		d, err := openSysDir(dir)
		if err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		children, err := d.names()
		d.close()
		if err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		sort.Strings(children)
		var fme string
		var ports []string
		for _, c := range children {
			switch {
			case strings.HasPrefix(c, w.l.fmePrefix):
				fme = filepath.Join(dir, c)
			case strings.HasPrefix(c, w.l.portPrefix):
				ports = append(ports, filepath.Join(dir, c))
			}
		}
		if fme == "" && len(ports) == 0 {
			continue // a PR-region directory, not a card
		}
		// <pci function>/fpga_region/regionN or <pci function>/fpga/intel-fpga-dev.N
		pciPath := filepath.Dir(filepath.Dir(dir))
		if fme != "" {
			plan(pciPath).fmeDir = fme
		}
		for _, p := range ports {
			if physfn, err := os.Readlink(filepath.Join(pciPath, "physfn")); err == nil {
				pf := plan(filepath.Join(pciPath, physfn))
				pf.ports = append(pf.ports, portPlan{dir: p, pciPath: pciPath, vf: true})
				continue
			}
			if fme == "" {
				res.Errors = append(res.Errors, fmt.Errorf("port %s: no FME in %s and no physfn link to a physical function", p, dir))
				continue
			}
			pl := plan(pciPath)
			pl.ports = append(pl.ports, portPlan{dir: p, pciPath: pciPath})
		}
	}
	for _, p := range order {
		p.interfaceIDFiles = prRegions[p.fmeDir]
	}
	w.readAll(order)
	for _, p := range order {
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

// readAll reads the planned cards with a small pool of workers.
func (w *walker) readAll(plans []*cardPlan) {
	workers := runtime.GOMAXPROCS(0)
	if workers > len(plans) {
		workers = len(plans)
	}
	if workers <= 1 {
		for _, p := range plans {
			w.read(p)
		}
		return
	}
	next := make(chan *cardPlan)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				w.read(p)
			}
		}()
	}
	for _, p := range plans {
		next <- p
	}
	close(next)
	wg.Wait()
}

func (w *walker) read(p *cardPlan) {
	p.card, p.cardHealth, p.err = w.readCard(p)
	if p.err != nil {
		return
	}
	card := p.cardHealth
	for _, pp := range p.ports {
		port, err := w.readPort(pp, p.card, card)
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
		return a.ID < b.ID
	})
}

func (w *walker) readCard(p *cardPlan) (*Card, Health, error) {
	addr := filepath.Base(p.pciPath)
	if p.fmeDir == "" {
		var err error
		if p.fmeDir, err = w.findFME(p.pciPath); err != nil {
			return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
		}
	}
	c := &Card{Driver: w.l.driver, PCIAddress: addr, PCIPath: p.pciPath, NUMANode: -1}
	fme, err := openSysDir(p.fmeDir)
	if err != nil {
		return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
	}
	defer fme.close()
	if c.FME, err = w.devNode(fme); err != nil {
		return nil, Health{}, fmt.Errorf("card %s: %w", addr, err)
	}
	if v, err := fme.read("socket_id"); err == nil {
		c.SocketID, _ = strconv.Atoi(v)
	}
	if v, err := fme.read("ports_num"); err == nil {
		c.PortsNum, _ = strconv.Atoi(v)
	}
	c.BitstreamID, _ = fme.read("bitstream_id")
	if hw, err := openSysDir(filepath.Join(p.fmeDir, "hwmon")); err == nil {
		if names, err := hw.names(); err == nil && len(names) > 0 {
			sort.Strings(names)
			c.hwmon = filepath.Join(hw.path, names[0])
		}
		hw.close()
	}
	if c.InterfaceID, c.interfaceIDFile, err = w.interfaceID(fme, p.interfaceIDFiles); err != nil {
		return nil, Health{}, fmt.Errorf("card %s: interface ID: %w", addr, err)
	}
	if pci, err := openSysDir(p.pciPath); err == nil {
		c.VendorID, _ = pci.read("vendor")
		c.DeviceID, _ = pci.read("device")
		if v, err := pci.read("numa_node"); err == nil {
			if n, err := strconv.Atoi(v); err == nil {
				c.NUMANode = n
			}
		}
		pci.close()
	}
	return c, w.l.cardHealth(c, fme), nil
}

// interfaceID reads the card's PR interface ID and names the file it came
// from: for DFL a compat_id file found in the class directory, else the
// layout's attribute below the FME.
func (w *walker) interfaceID(fme sysDir, files []string) (string, string, error) {
	if len(files) == 0 {
		p, err := w.l.interfaceIDPath(fme.path)
		if err != nil {
			return "", "", err
		}
		files = []string{p}
	}
	id, err := ReadID(files[0])
	return id, files[0], err
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

func (w *walker) readPort(pp portPlan, c *Card, card Health) (*Port, error) {
	d, err := openSysDir(pp.dir)
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", pp.dir, err)
	}
	defer d.close()
	node, err := w.devNode(d)
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", pp.dir, err)
	}
	v, err := d.read("id")
	if err != nil {
		return nil, fmt.Errorf("port %s: %w", pp.dir, err)
	}
	id, err := strconv.Atoi(v)
	if err != nil {
		return nil, fmt.Errorf("port %s: id %q is not a number", pp.dir, v)
	}
	p := &Port{
		Node:            node,
		ID:              id,
		PCIAddress:      filepath.Base(pp.pciPath),
		PCIPath:         pp.pciPath,
		VirtualFunction: pp.vf,
	}
	w.l.checkIn(d, c, card, p, "")
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
	return DevNode{
		Name:      name,
		SysfsPath: d.path,
		Path:      "/dev/" + name,
		HostPath:  filepath.Join(w.root, "dev", name),
		Major:     major,
		Minor:     minor,
	}, nil
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
