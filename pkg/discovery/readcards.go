package discovery

import (
	"context"
	"sync/atomic"
	"time"
)

// CardDir names a card a family reads with ReadCards.
type CardDir struct {
	// PCIAddress names the card in errors.
	PCIAddress string
	// PCIPath is the card's PCI directory (the Card's PCIPath): the key
	// its stuck reads and last result are kept by.
	PCIPath string
}

// ReadCards reads a family's cards for a Scan, card k by read(k, tr) on a
// goroutine of its own and within the Scanner's ReadTimeout, read noting
// its reads in tr, and adds each card to res.Cards and each error to
// res.Errors. A card whose read is stuck, since an earlier pass or in this
// one, is added as the last pass saw it with its ports unhealthy, or as an
// error when no pass did. It returns whether each card's read returned in
// time, failed or not (a family keeps what it learned only of those), or
// nil when ctx ended.
func (s *Scanner) ReadCards(ctx context.Context, cards []CardDir, read func(k int, tr *Tracker) (*Card, error), res *Result) []bool {
	timeout := s.readTimeout()
	stuck := s.stuckCards()
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	stall := func(c CardDir, r stuckRead) {
		if old := last[c.PCIPath]; old != nil {
			res.Cards = append(res.Cards, stalled(old, r, timeout))
			return
		}
		res.Errors = append(res.Errors, timedOut(c.PCIAddress, r.attr, timeout))
	}
	var todo []int
	for k, c := range cards {
		if r, ok := stuck[c.PCIPath]; ok {
			stall(c, r)
			continue
		}
		todo = append(todo, k)
	}
	type result struct {
		card *Card
		err  error
	}
	trackers := make([]*Tracker, len(todo))
	for j := range trackers {
		trackers[j] = &Tracker{}
	}
	returned := make([]atomic.Bool, len(todo))
	results, done, _ := boundedMap(ctx, len(todo), timeout,
		func(j int) result {
			c, err := read(todo[j], trackers[j])
			return result{c, err}
		},
		func(j int, _ result) {
			returned[j].Store(true)
			s.setStuck(cards[todo[j]].PCIPath, stuckRead{}, false)
		})
	if ctx.Err() != nil {
		return nil
	}
	ok := make([]bool, len(cards))
	for j, k := range todo {
		c := cards[k]
		ok[k] = done[j]
		switch {
		case done[j] && results[j].err != nil:
			res.Errors = append(res.Errors, results[j].err)
		case done[j]:
			res.Cards = append(res.Cards, results[j].card)
		default:
			r := stuckRead{attr: trackers[j].current(), since: time.Now()}
			s.setStuck(c.PCIPath, r, true)
			if returned[j].Load() {
				s.setStuck(c.PCIPath, stuckRead{}, false)
			}
			stall(c, r)
		}
	}
	return ok
}
