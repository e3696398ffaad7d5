package state

import (
	"context"
	"fmt"
)

// Drain makes the State take no more work: every Prepare, Unprepare and
// ProgramHeld that begins afterwards fails with ErrDraining, and no CDI
// spec rewrite starts; what began before runs on, and WaitIdle waits for
// it. A process that hands the node to another (a stopping daemon) calls
// Drain once it stopped serving, then WaitIdle, before it releases the
// state lock: a call its servers were still handling when they stopped
// then changes nothing after the other process took over.
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

// WaitIdle waits until no programming job and no operation (a prepare
// committing what its jobs loaded, one answered from a record, a release,
// a CDI spec rewrite) runs, or ctx ends; once the State's context ended,
// no rewrite starts. Programming cannot be stopped part way; a process
// that hands the node to another (a rolling update) stops taking work and
// calls WaitIdle before it releases the state lock, so that two processes
// never program, write a spec or commit at once.
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
			// Writing a spec or the checkpoint: short.
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

// waitFlush waits, while ctx lasts, for a checkpoint flush in flight
// (one outside any operation: an answer made durable after a flush
// failed). Once the State drains, no flush starts after it returned.
func (s *State) waitFlush(ctx context.Context) error {
	s.mu.Lock()
	store, draining := s.book.store, s.draining
	s.mu.Unlock()
	if draining {
		return store.Stop(ctx)
	}
	return store.Idle(ctx)
}

// CancelJobs cancels every programming job in flight with cause: a backend
// that can stop part way does (XRT ends its xrt-smi), leaving its region
// in an unknown state that the holder's record (PhaseStarted) makes the
// next process program again. The stopping daemon calls it once WaitIdle
// gave up, so that no programming outlives the process that holds the
// node's state lock.
func (s *State) CancelJobs(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.regions.jobs {
		j.cancel(cause)
	}
}
