package state

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// op is the one operation in flight for a holder: a prepare, or the
// release of an Unprepare.
type op struct {
	holder        Holder
	release       bool
	cancel        context.CancelCauseFunc // cancels the prepare's jobs
	jobs          []*job
	done          chan struct{} // closed once out and err are set
	out           Outcome
	err           error
	reported      bool // a caller read out.Programmed
	beforeBinding bool // BeforeBinding
	refresh       bool // rewrites a stale spec (RefreshSpecs)
}

// finish ends an operation with its outcome. On failure, devices it
// reserved that no record holds are free again. A success of a holder an
// Unprepare began to release meanwhile becomes ErrReleasing.
func (s *State) finish(op *op, out Outcome, err error) {
	if s.settle(op, out, err) {
		s.notify()
	}
}

// settle is finish under mu; it reports whether the operation failed.
func (s *State) settle(op *op, out Outcome, err error) (failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !op.release && s.ops.releasing[op.holder.UID] {
		err = fmt.Errorf("%w: claim %s was unprepared while it was being prepared", ErrReleasing, op.holder)
		out.Devices = nil
	}
	op.out, op.err = out, err
	if err != nil {
		s.reholdFromRecords(op.holder.UID)
	}
	close(op.done)
	if !op.refresh { // a spec rewrite changes no hold
		s.changed(op.holder.UID)
	}
	if len(out.Programmed) == 0 && !op.release {
		op.reported = true
		delete(s.ops.active, op.holder.UID)
		s.forgetVersion(op.holder.UID)
		if err == nil || !op.refresh {
			s.recheckSpec(op.holder.UID)
		}
	}
	return err != nil
}

// await waits for a prepare operation, at most PrepareWait, and returns
// its outcome; the first caller to see it finished gets its programming
// results.
func (s *State) await(ctx context.Context, op *op) (Outcome, error) {
	timer := time.NewTimer(s.cfg.PrepareWait)
	defer timer.Stop()
	select {
	case <-op.done:
	case <-timer.C:
		return Outcome{}, s.inProgress(op, "the kubelet retries and a later call returns the result")
	case <-ctx.Done():
		return Outcome{}, s.inProgress(op, fmt.Sprintf("the call was cancelled: %v", context.Cause(ctx)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := op.out
	if op.reported {
		out.Programmed = nil
	}
	op.reported = true
	if op.err == nil { // a release decided before the answer must see it
		s.changed(op.holder.UID)
	}
	if s.ops.active[op.holder.UID] == op {
		delete(s.ops.active, op.holder.UID)
		s.recheckSpec(op.holder.UID)
	}
	s.forgetVersion(op.holder.UID)
	return out, op.err
}

// awaitHolderJobs waits, at most PrepareWait and while ctx lasts, until
// no programming job of uid runs.
func (s *State) awaitHolderJobs(ctx context.Context, uid types.UID) error {
	timer := time.NewTimer(s.cfg.PrepareWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		running := s.jobOf(uid)
		s.mu.Unlock()
		if running == nil {
			return nil
		}
		if s.hooks.onAwaitJob != nil {
			s.hooks.onAwaitJob(uid)
		}
		what := "the kubelet retries and a later call returns the result"
		select {
		case <-running.done:
			continue
		case <-timer.C:
		case <-ctx.Done():
			what = fmt.Sprintf("the call was cancelled: %v", context.Cause(ctx))
		}
		return running.busy(what)
	}
}

// inProgress describes an operation still running.
func (s *State) inProgress(op *op, what string) error {
	for _, j := range op.jobs {
		select {
		case <-j.done:
			continue
		default:
		}
		return j.busy(what)
	}
	return fmt.Errorf("%w: claim %s is being prepared; %s", ErrInProgress, op.holder, what)
}

// Version identifies the state of a holder's hold: it changes whenever a
// prepare of the holder begins or ends, and is zero while nothing of the
// holder is known.
type Version uint64

// Version returns uid's Version, for Unprepare's IfUnchanged.
func (s *State) Version(uid types.UID) Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops.versions[uid]
}

// changed gives uid a new Version. Caller holds mu.
func (s *State) changed(uid types.UID) {
	s.ops.last++
	s.ops.versions[uid] = s.ops.last
}

// forgetVersion drops uid's Version once no record, operation or job of
// uid is left. Caller holds mu.
func (s *State) forgetVersion(uid types.UID) {
	if _, recorded := s.book.cp.Claims[string(uid)]; !recorded && s.ops.active[uid] == nil && s.jobOf(uid) == nil {
		delete(s.ops.versions, uid)
	}
}
