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
	holder  Holder
	release bool
	// cancel cancels the prepare's programming jobs when an Unprepare asks
	// for the holder's release.
	cancel context.CancelCauseFunc
	jobs   []*job
	// done is closed once out and err are set.
	done chan struct{}
	out  Outcome
	err  error
	// reported is set once a caller read out.Programmed.
	reported bool
	// beforeBinding: the prepare ends at PhaseProgrammed (BeforeBinding).
	beforeBinding bool
	// refresh: the operation rewrites a stale spec (RefreshSpecs).
	refresh bool
}

// finish ends an operation with its outcome. On failure, devices the
// operation reserved that no record holds for the holder are free again.
// A success of a holder an Unprepare began to release meanwhile becomes
// ErrReleasing: no caller is handed a hold a release is freeing.
func (s *State) finish(op *op, out Outcome, err error) {
	if s.settle(op, out, err) {
		// What it reserved, and what an undo of its record freed, is
		// free again: devices another holder may take now.
		s.notify()
	}
}

// settle is finish under mu; it reports whether the operation failed.
func (s *State) settle(op *op, out Outcome, err error) (failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !op.release && s.ops.releasing[op.holder.UID] {
		// Checked where the answer is made: a release that began after
		// the operation's earlier look (its Version unchanged then)
		// would free a hold answered to the caller.
		err = fmt.Errorf("%w: claim %s was unprepared while it was being prepared", ErrReleasing, op.holder)
		out.Devices = nil
	}
	op.out, op.err = out, err
	if err != nil {
		s.reholdFromRecords(op.holder.UID)
	}
	close(op.done)
	if !op.refresh {
		// A spec rewrite changes no hold.
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

// await waits for a prepare operation, at most PrepareWait while it
// programs, and returns its outcome. The first caller to see a finished
// operation reports its programming results and retires it.
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
	if op.err == nil {
		// An answer handed out now (maybe long after the operation
		// ended) is a change a release decided on earlier evidence
		// must see.
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
// prepare of the holder begins (answered from its record or not) and
// whenever one ends, and never returns to an earlier value while the
// holder has a record or an operation. It is zero until the holder's
// first prepare in this process, and again once nothing of it is left.
type Version uint64

// Version returns uid's Version. Read before the evidence a release is
// decided on, and passed to Unprepare with IfUnchanged, it keeps a
// prepare that came meanwhile from being released.
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

// forgetVersion drops uid's Version once nothing of uid is left: no
// record, no operation, no job. Caller holds mu.
func (s *State) forgetVersion(uid types.UID) {
	if _, recorded := s.book.cp.Claims[string(uid)]; !recorded && s.ops.active[uid] == nil && s.jobOf(uid) == nil {
		delete(s.ops.versions, uid)
	}
}
