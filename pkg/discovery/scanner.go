package discovery

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Scanner discovers the cards of every selected family below a root
// directory. Scan walks the tree; Refresh re-reads only the ID and health
// attributes of an earlier result.
//
// A Scanner remembers, from one Scan to the next, what the kernel does not
// change while a device exists (see the families), so that a rescan reads
// again only what can change plus everything of devices it has not seen
// before.
//
// Set Root, Select and ReadTimeout before the first Scan; the zero value
// of the rest is ready, and the methods are safe for concurrent use.
type Scanner struct {
	// Root is the directory that holds sys/ and dev/ ("/" on a host).
	Root string
	// Select chooses the families; the zero value reads every family
	// whose kernel driver is loaded.
	Select Selection
	// ReadTimeout bounds how long the reads of one card may take in one
	// Scan or Refresh; DefaultReadTimeout when zero. A card whose read
	// outlasts it is reported unhealthy (cause "read-of-afu_id-timed-out",
	// the message naming the file's path), the
	// others are read on, and the card is not read again until the
	// stalled read returns.
	ReadTimeout time.Duration

	mu sync.Mutex
	// known is what each family remembers between scans.
	known map[KernelDriver]any
	// stuck holds the cards (by PCI directory) whose reads outlasted
	// ReadTimeout and have not returned yet; last the latest card of each
	// PCI directory a pass produced.
	stuck map[string]stuckRead
	last  map[string]*Card
	// returned is signalled when a stuck read returned (see Returned).
	returned chan struct{}
}

func (s *Scanner) readTimeout() time.Duration {
	if s.ReadTimeout > 0 {
		return s.ReadTimeout
	}
	return DefaultReadTimeout
}

// stuckCards returns a copy of the cards whose reads are stuck.
func (s *Scanner) stuckCards() map[string]stuckRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.stuck)
}

// Returned receives after a read that a pass gave up on as stuck
// returned: the card can be read again, and a Scan finds it (a card stuck
// since the first pass that saw it is not in any result before; one that
// was is kept as that pass read it).
func (s *Scanner) Returned() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.returnedLocked()
}

// returnedLocked is Returned's channel, made at first use. The caller
// holds mu.
func (s *Scanner) returnedLocked() chan struct{} {
	if s.returned == nil {
		s.returned = make(chan struct{}, 1)
	}
	return s.returned
}

// setStuck records (or, with a zero r, clears) a stuck card.
func (s *Scanner) setStuck(pciPath string, r stuckRead, stuck bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !stuck {
		if _, ok := s.stuck[pciPath]; !ok {
			return
		}
		delete(s.stuck, pciPath)
		select {
		case s.returnedLocked() <- struct{}{}:
		default:
		}
		return
	}
	if s.stuck == nil {
		s.stuck = map[string]stuckRead{}
	}
	s.stuck[pciPath] = r
}

// remember keeps res's cards for the passes that find them stuck.
func (s *Scanner) remember(res *Result) {
	last := make(map[string]*Card, len(res.Cards))
	for _, c := range res.Cards {
		last[c.PCIPath] = c
	}
	s.mu.Lock()
	s.last = last
	s.mu.Unlock()
}

// stalled is the card at pciPath, last seen as c (nil when never), while a
// read of it is stuck: its ports unhealthy, everything else as last seen.
func stalled(c *Card, r stuckRead, timeout time.Duration) *Card {
	h := r.health(c.PCIAddress, timeout)
	out := *c
	out.Ports = make([]*Port, len(c.Ports))
	for i, p := range c.Ports {
		q := *p
		q.Health = h
		out.Ports[i] = &q
	}
	return &out
}

// Detect reports which families' cards a Scan reads: the selected ones,
// or every family whose kernel driver shows below the root.
func (s *Scanner) Detect() []KernelDriver {
	var out []KernelDriver
	for _, f := range Families() {
		if s.selects(f) {
			out = append(out, f.Driver())
		}
	}
	return out
}

// selects reports whether a Scan reads family f.
func (s *Scanner) selects(f Family) bool {
	d := f.Driver()
	switch {
	case slices.Contains(s.Select.Exclude, d):
		return false
	case len(s.Select.Only) > 0:
		return slices.Contains(s.Select.Only, d)
	}
	return f.Present(s.Root)
}

// Scan walks the tree once (ScanContext without a deadline).
func (s *Scanner) Scan() (*Result, error) { return s.ScanContext(context.Background()) }

// ScanContext walks the tree once, family by family. Unusable cards and
// ports are reported in Result.Errors and left out; a card whose read is
// stuck is reported unhealthy (see ReadTimeout). An error is returned only
// when the root or a selected family's directory cannot be read, or ctx
// ended. Cards are ordered by PCI address.
func (s *Scanner) ScanContext(ctx context.Context) (*Result, error) {
	res := &Result{Drivers: s.Detect(), Started: time.Now()}
	if len(res.Drivers) == 0 {
		// Nothing loaded: say so when the root itself is missing.
		if _, err := os.Stat(s.Root); err != nil {
			return nil, fmt.Errorf("discovery root: %w: give the directory that holds sys/ and dev/ (\"/\" on a host)", err)
		}
		return res, nil
	}
	for _, d := range res.Drivers {
		f := FamilyOf(d)
		if f == nil {
			return nil, fmt.Errorf("kernel driver %q is selected but no family of that name is registered: select one of %s", d, strings.Join(familyNames(), ", "))
		}
		if err := f.Scan(ctx, s, res); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("discovery stopped: %w", context.Cause(ctx))
		}
	}
	sort.SliceStable(res.Cards, func(i, j int) bool { return res.Cards[i].PCIAddress < res.Cards[j].PCIAddress })
	for _, c := range res.Cards {
		if c.readAt.IsZero() { // read by this pass, not kept stalled
			c.readAt = res.Started
		}
	}
	s.remember(res)
	return res, nil
}

// knownOf returns what an Intel family remembered from the last scan
// (empty the first time).
func (s *Scanner) knownOf(d KernelDriver) *known {
	if k, ok := s.Remembered(d).(*known); ok {
		return k
	}
	return &known{}
}

// Remembered returns what family d stored with Remember in the last Scan
// (nil the first time): what it need not read again while a device stays.
func (s *Scanner) Remembered(d KernelDriver) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[d]
}

// Remember stores what family d learned in a Scan for the next one.
func (s *Scanner) Remember(d KernelDriver, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.known == nil {
		s.known = map[KernelDriver]any{}
	}
	s.known[d] = v
}

// Refresh re-reads, for every card of an earlier result, only the
// attributes that change without a hot-plug event (IDs, error and status
// registers, device nodes), each card by its family and within the read
// timeout. It never walks the tree. It returns a new result and whether
// any published field (AFU ID, interface ID, health) changed.
func (s *Scanner) Refresh(old *Result) (*Result, bool) {
	return s.RefreshContext(context.Background(), old)
}

// RefreshContext is Refresh that gives up when ctx ends (returning old,
// unchanged).
func (s *Scanner) RefreshContext(ctx context.Context, old *Result) (*Result, bool) {
	timeout := s.readTimeout()
	stuck := s.stuckCards()
	res := &Result{Drivers: old.Drivers, Errors: old.Errors, Cards: make([]*Card, len(old.Cards)), Started: time.Now()}
	changes := make([]bool, len(old.Cards))
	stall := func(i int, r stuckRead) {
		res.Cards[i] = stalled(old.Cards[i], r, timeout)
		for k, p := range res.Cards[i].Ports {
			changes[i] = changes[i] || p.Health.String() != old.Cards[i].Ports[k].Health.String()
		}
	}
	var todo []int
	for i, c := range old.Cards {
		if r, ok := stuck[c.PCIPath]; ok {
			stall(i, r)
			continue
		}
		todo = append(todo, i)
	}
	type refreshed struct {
		card    *Card
		changed bool
	}
	trackers := make([]*Tracker, len(todo))
	for k := range trackers {
		trackers[k] = &Tracker{}
	}
	returned := make([]atomic.Bool, len(todo))
	results, done, _ := boundedMap(ctx, len(todo), timeout,
		func(k int) refreshed {
			oc := old.Cards[todo[k]]
			f := FamilyOf(oc.Driver)
			if f == nil { // no family of its driver: keep it as read
				c := *oc
				return refreshed{&c, false}
			}
			c, changed := f.Refresh(oc, trackers[k])
			return refreshed{c, changed}
		},
		func(k int, _ refreshed) {
			returned[k].Store(true)
			s.setStuck(old.Cards[todo[k]].PCIPath, stuckRead{}, false)
		})
	if ctx.Err() != nil {
		return old, false
	}
	for k, i := range todo {
		if done[k] {
			results[k].card.readAt = res.Started
			res.Cards[i], changes[i] = results[k].card, results[k].changed
			continue
		}
		r := stuckRead{attr: trackers[k].current(), since: time.Now()}
		s.setStuck(old.Cards[i].PCIPath, r, true)
		if returned[k].Load() {
			s.setStuck(old.Cards[i].PCIPath, stuckRead{}, false)
		}
		stall(i, r)
	}
	s.remember(res)
	return res, slices.Contains(changes, true)
}
