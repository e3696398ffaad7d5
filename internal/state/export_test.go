package state

import "time"

// SetGather makes s's flushes take flushTime on average as far as
// gathering is concerned, wait at most bound, and call onGather when one
// starts waiting.
func SetGather(s *State, flushTime, bound time.Duration, onGather func()) {
	j := &s.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushTime, j.maxGather, j.onGather, j.lastBatch = flushTime, bound, onGather, 0
}
