package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrStopped is Save's error once Stop was called.
var ErrStopped = errors.New("the checkpoint is no longer written")

// Store is an open checkpoint file. Save is safe for concurrent use and
// shares flushes (group commit): a saver that arrives while a flush runs
// waits for it, and the first of those waiting then leads one flush that
// covers every change made before it.
type Store struct {
	file  *file
	syncs atomic.Uint64

	mu      sync.Mutex
	flight  chan struct{} // closed when the flush in flight ends; nil when none runs
	waiting int           // savers waiting for flight
	durable uint64        // the newest generation on the disk
	stopped bool
}

// Open opens (creating it when missing) the checkpoint file at path and
// loads it. A damaged file is kept aside as path.corrupt-<time> and
// replaced at the first save; Open then returns the checkpoint of the
// newest sound slot and an error wrapping ErrCorrupt, and the caller must
// treat it as possibly incomplete. A file of a newer driver is left
// untouched and fails with ErrNewer; other errors are fatal too.
func Open(path string) (*Store, *Checkpoint, error) {
	f, cp, err := load(path)
	if f == nil {
		return nil, nil, err
	}
	return &Store{file: f}, cp, err
}

// Save returns once generation gen of the caller's checkpoint, or a later
// one, is on the disk. latest returns the newest checkpoint and its
// generation; the saver that leads a flush calls it once no other flush
// runs, so that the flush carries every change made before.
func (s *Store) Save(gen uint64, latest func() (*Checkpoint, uint64)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.durable < gen {
		switch {
		case s.flight != nil:
			flight := s.flight
			s.waiting++
			s.mu.Unlock()
			<-flight
			s.mu.Lock()
			s.waiting--
		case s.stopped:
			return ErrStopped
		default:
			return s.lead(latest)
		}
	}
	return nil
}

// lead runs one flush of latest's checkpoint. Caller holds mu, which it
// releases while the file is written.
func (s *Store) lead(latest func() (*Checkpoint, uint64)) error {
	flight := make(chan struct{})
	s.flight = flight
	s.mu.Unlock()
	cp, newest := latest()
	err := s.file.save(cp)
	s.mu.Lock()
	s.flight = nil
	close(flight)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	s.durable = max(s.durable, newest)
	s.syncs.Add(1)
	return nil
}

// Syncs is how many flushes reached the disk since Open.
func (s *Store) Syncs() uint64 { return s.syncs.Load() }

// Stop makes every flush that would start from now on fail with
// ErrStopped, and waits, while ctx lasts, for the one in flight: a
// process handing the node to another writes nothing after.
func (s *Store) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	return s.Idle(ctx)
}

// Idle waits, while ctx lasts, until no flush runs.
func (s *Store) Idle(ctx context.Context) error {
	s.mu.Lock()
	flight := s.flight
	s.mu.Unlock()
	if flight == nil {
		return nil
	}
	select {
	case <-flight:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("a checkpoint flush is still running: %w", context.Cause(ctx))
	}
}

// Close waits for a flush in flight and releases the file; saves fail
// afterwards.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.flight != nil {
		flight := s.flight
		s.mu.Unlock()
		<-flight
		s.mu.Lock()
	}
	return s.file.close()
}
