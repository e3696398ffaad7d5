package discovery

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// known is what a scan of one family learned that stays true while a
// device exists.
type known struct {
	links map[DirKey]string      // class or driver directory entry -> link target
	cards map[DirKey]*cardStatic // FME directory -> the card's fixed fields
	ports map[DirKey]*portStatic // port directory -> the port's fixed fields
}

// DirKey identifies a directory entry across scans.
type DirKey struct {
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
	fmeKey DirKey
	// interfaceIDFiles are the PR regions' compat_id files (DFL) found in
	// the class directory.
	interfaceIDFiles []string
	ports            []portPlan
	// owned are the listings whose open directories the plan reads
	// through; tr notes what its reads are at.
	owned []int
	tr    *Tracker
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
	key     DirKey
	pciPath string
	vf      bool
	static  *portStatic
}

// listing is what the listing pass learned about one class directory entry.
type listing struct {
	key    DirKey
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

	order := w.plan(listed, res)
	w.readBounded(order, listed, handedOver)
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("discovery stopped: %w", context.Cause(w.ctx))
	}
	w.collect(order, res)
	sort.Slice(res.Cards, func(i, j int) bool { return res.Cards[i].PCIAddress < res.Cards[j].PCIAddress })
	return nil
}

// plan groups the listed class directory entries into cards: each FME's
// card with its ports, a virtual function's ports with the card of its
// physical function. Unusable entries and orphan ports go to res.Errors.
func (w *walker) plan(listed []listing, res *Result) []*cardPlan {
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
			p.fmeKey = DirKey{path: p.fme.path, ino: l.fme.ino}
		}
		for _, c := range l.ports {
			pp := portPlan{dir: l.d.sub(c.name), pciPath: l.pciPath}
			pp.key = DirKey{path: pp.dir.path, ino: c.ino}
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
		p.tr = &Tracker{}
		p.fme = p.fme.tracked(p.tr)
		for i := range p.ports {
			p.ports[i].dir = p.ports[i].dir.tracked(p.tr)
		}
	}
	return order
}

// collect adds the planned cards that were read to res (and their errors
// to res.Errors), and remembers their fixed fields for the next scan.
func (w *walker) collect(order []*cardPlan, res *Result) {
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
	l := listing{key: DirKey{path: classDir + "/" + e.name, ino: e.ino}, d: sysDir{fd: -1}}
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
