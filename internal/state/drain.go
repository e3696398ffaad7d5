package state

import (
	"context"
	"fmt"
)

// Drain makes the State take no more work: every Prepare, Unprepare and
// ProgramHeld that begins afterwards fails with ErrDraining, and no CDI
// spec rewrite starts; WaitIdle waits for what began before.
func (s *State) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
}

// drainingError is ErrDraining for what of holder was asked, when the
// State drains; nil otherwise. Caller holds mu.
func (s *State) drainingError(what string, holder any) error {
	if !s.draining {
		return nil
	}
	return fmt.Errorf("%w: %s %v refused; retry", ErrDraining, what, holder)
}

// WaitIdle waits until no programming job, operation or checkpoint flush
// runs, or ctx ends.
func (s *State) WaitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		var running *job
		for _, j := range s.regions.jobs {
			running = j
			break
		}
		var busy *op
		for _, o := range s.ops.active {
			select {
			case <-o.done:
			default:
				busy = o
			}
		}
		s.mu.Unlock()
		if running == nil && busy != nil {
			select {
			case <-busy.done:
				continue
			case <-ctx.Done():
				return fmt.Errorf("an operation of %s is still running: %w", busy.holder, context.Cause(ctx))
			}
		}
		if running == nil {
			return s.waitFlush(ctx)
		}
		running.logger.Info("Waiting for programming to finish before stopping")
		select {
		case <-running.done:
		case <-ctx.Done():
			return fmt.Errorf("programming of %s still running: %w", running.device, context.Cause(ctx))
		}
	}
}

// waitFlush waits for a checkpoint flush in flight; once the State
// drains, no flush starts after it returned.
func (s *State) waitFlush(ctx context.Context) error {
	s.mu.Lock()
	store, draining := s.book.store, s.draining
	s.mu.Unlock()
	if draining {
		return store.Stop(ctx)
	}
	return store.Idle(ctx)
}

// CancelJobs cancels every programming job in flight with cause; the
// holder's started record makes the next process program its region
// again.
func (s *State) CancelJobs(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.regions.jobs {
		j.cancel(cause)
	}
}
