package state

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// journal writes the checkpoint to its file. Changes are made in memory
// (update) and then made durable (sync); concurrent callers share flushes:
// a sync that finds its change already covered by a finished flush returns
// at once, and one flush covers every change made before it started.
type journal struct {
	mu    sync.Mutex // serialises flushes
	file  *CheckpointFile
	saved uint64 // the newest generation on disk
	err   error  // the last flush's error, until a flush succeeds
	syncs atomic.Uint64
}

// update is the one place the checkpoint changes: it applies change to the
// in-memory checkpoint and returns the generation that sync must make
// durable. Caller holds s.mu; change must keep every device of a record
// held (s.holds) by the record's holder.
func (s *State) update(change func(cp *Checkpoint)) uint64 {
	change(s.cp)
	s.gen++
	return s.gen
}

// sync makes generation gen of the checkpoint durable, flushing every
// change made so far: callers that wait while a flush runs share the next
// one (group commit). Callers must not hold s.mu.
func (s *State) sync(gen uint64) error {
	j := &s.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.saved >= gen && j.err == nil {
		return nil
	}
	s.mu.Lock()
	snapshot, newest := s.cp.clone(), s.gen
	s.mu.Unlock()
	if err := j.file.Save(snapshot); err != nil {
		j.err = fmt.Errorf("save checkpoint: %w", err)
		return j.err
	}
	if !j.file.noFlush {
		j.syncs.Add(1)
	}
	j.saved, j.err = newest, nil
	return nil
}

// commit applies change and makes it durable: update, then sync.
func (s *State) commit(change func(cp *Checkpoint)) error {
	s.mu.Lock()
	gen := s.update(change)
	s.mu.Unlock()
	return s.sync(gen)
}
