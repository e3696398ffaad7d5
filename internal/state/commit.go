package state

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A flush waits for changes it expects at most maxGather, and for changes
// it only guesses will come at most gatherFlushes times the average flush
// time (within maxGather).
const (
	gatherFlushes = 2
	maxGather     = time.Millisecond
	// streamGap: calls that shared a flush are taken to be followed by
	// more while the next flush comes less than streamGap after it (a
	// loaded node's round trips to the kubelet take milliseconds); a
	// later caller starts afresh. A wrong guess costs one wait, at most
	// maxGather.
	streamGap = 10 * time.Millisecond
)

// journal writes the checkpoint to its file. Changes are made in memory
// (update) and then made durable (sync); concurrent callers share flushes:
// a sync that finds its change already covered by a finished flush returns
// at once, and one flush covers every change made before it started.
//
// Before a flush, the caller that runs it waits for the changes of other
// operations (group commit, as jbd2 batches synchronous handles):
//   - while an operation is expected, for at most maxGather: a prepare or
//     release in the State that is not programming and not yet waiting,
//     or a claim of a kubelet call announced by Expect that has not
//     reached the State yet. Its change is sure to come, and waiting
//     for it saves a flush however fast the disk flushes: bounded by
//     the flush time instead, a burst of calls on a fast disk took a
//     flush for every few of them;
//   - while calls come together, for at most twice the average flush time
//     (maxGather at most): the caller found another flushing before it,
//     or the previous flush served more than one call (claims of one
//     kubelet call count once) and ended less than streamGap ago. Such
//     callers keep arriving, and most are not known before they do. The
//     guess ends once as many calls wait as were in sync when that
//     flush ended: eight callers sending claim after claim are all back
//     then, and a wait for more left the CPUs idle, a tenth of the time.
//
// A caller that is alone, with nothing expected, flushes at once: a
// single prepare never waits, not even right after a flush that many
// claims of one call shared.
type journal struct {
	mu    sync.Mutex // serialises flushes: a flight's leader holds it
	file  *CheckpointFile
	saved atomic.Uint64 // the newest generation on disk
	err   error         // the last flush's error, until a flush succeeds (State.mu)
	syncs atomic.Uint64
	// counts holds, in one word so that a reader sees both change at
	// once, how many callers are in sync whose change is not yet on the
	// disk (the low 32 bits) and how many of them have a kubelet call with
	// another caller in sync already (the high 32 bits); countMu makes a
	// caller's classification and its count one step. Counted apart, a
	// flush that read one count updated and the other not yet found a
	// second kubelet call where there was one, and waited a whole gather
	// bound for it. arrived wakes a gathering flush (wake).
	countMu sync.Mutex
	counts  atomic.Int64
	arrived chan struct{}
	// incoming counts the announced claims (Expect) not yet in the State.
	incoming atomic.Int32
	// flushTime is the moving average of a flush's duration; lastBatch and
	// lastCalls are how many callers and calls the previous flush served,
	// lastEnd when it ended.
	flushTime time.Duration
	lastBatch int32
	lastCalls int32
	lastEnd   time.Time
	// lastWidth is how many calls were in sync when the previous flush
	// ended: those it served and those waiting for the next.
	lastWidth int32
	// flight is the flush a caller leads, from when it is chosen until
	// it ends (startSync); State.mu guards it and err.
	flight *flight
	// maxGather bounds a flush's wait (maxGather) and streamGap ends a
	// stream of calls (streamGap); tests change them. onGather and
	// onFlush, when set, are called when a flush starts waiting and
	// when it starts writing (tests).
	maxGather time.Duration
	streamGap time.Duration
	onGather  func()
	onFlush   func()
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
// one (group commit). call is the kubelet call the change belongs to
// (Expect), or nil. Callers must not hold s.mu.
func (s *State) sync(gen uint64, call *announced) error {
	wait, _ := s.startSync(gen, call, false)
	return wait()
}

// durable returns once every change made so far is on the disk. An
// answer drawn from the state in memory instead of an operation's own
// commit (a completed record, a holder not known) waits for it: after a
// flush failed, memory holds changes the disk may not, and a call the
// kubelet retries must not be told they are done. Callers must not hold
// s.mu.
func (s *State) durable(call *announced) error {
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	if s.journal.saved.Load() >= gen {
		return nil
	}
	return s.sync(gen, call)
}

// startSync is sync in two halves: it starts the flush that makes gen
// durable and returns wait, which ends it. Between the two the caller may
// do other work (the disk flushes meanwhile) but must not commit; it
// must call wait. overlap says it has such work: otherwise the flush is
// written synchronously (see aioWriter). Only a flush the caller leads
// alone with overlap is left running (flushing): every other one has
// ended before startSync returns, so that no caller's other work holds
// up the callers that come for the next.
//
// One caller at a time leads a flush (journal.flight). The others wait
// for the flight that takes their change along, and a flight's callers
// are all woken at once when it ends: queued on the flush lock instead,
// each ran its answer before the next took the lock, one after another
// on one CPU while the others idled. A caller whose change a flight's
// snapshot missed waits for that flight to end and then leads, or joins,
// the next.
func (s *State) startSync(gen uint64, call *announced, overlap bool) (wait func() error, flushing bool) {
	j := &s.journal
	j.enter(call)
	queued := j.calls() > 1 // another call's flush runs or gathers
	j.wake()
	for {
		s.mu.Lock()
		if j.saved.Load() >= gen && j.err == nil {
			s.mu.Unlock()
			break
		}
		f := j.flight
		if f == nil {
			f = &flight{done: make(chan struct{})}
			j.flight = f
			s.mu.Unlock()
			return s.lead(f, queued, call, overlap)
		}
		// A flight that has not taken its snapshot yet takes this change
		// along: it was made before.
		covered := !f.snapped || f.newest >= gen
		s.mu.Unlock()
		<-f.done
		if covered && f.err == nil {
			break
		}
		// Missed, or the flush failed: this caller leads or joins the
		// next, which tries again.
	}
	j.leave(call)
	return func() error { return nil }, false
}

// flight is one flush and the callers waiting for it. Its leader sets err
// and closes done when it ends; snapped and newest (the generation it
// writes) are set under State.mu when it takes its snapshot.
type flight struct {
	done    chan struct{}
	snapped bool
	newest  uint64
	err     error
}

// lead runs flight f, which the caller has just made the journal's
// (startSync): it takes the flush lock, gathers, writes the snapshot and
// ends f, at once or, for a caller alone with overlap, in the wait it
// returns (flushing).
func (s *State) lead(f *flight, queued bool, call *announced, overlap bool) (wait func() error, flushing bool) {
	j := &s.journal
	j.mu.Lock()
	// finish ends f with err and wakes its callers; flushed: a flush of
	// generation newest ran, and its outcome is the journal's.
	finish := func(flushed bool, newest uint64, err error) {
		s.mu.Lock()
		if flushed {
			if err == nil {
				j.saved.Store(newest)
			}
			j.err = err
		}
		j.flight = nil
		s.mu.Unlock()
		f.err = err
		close(f.done)
		j.mu.Unlock()
		j.leave(call)
	}
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle {
		// The next instance may have taken the node over.
		err := fmt.Errorf("%w: the checkpoint is no longer written", ErrDraining)
		finish(false, 0, err)
		return func() error { return err }, false
	}
	s.gather(queued)
	j.lastBatch = j.waiting()
	j.lastCalls = j.calls()
	s.mu.Lock()
	snapshot, newest := s.cp.clone(), s.gen
	f.snapped, f.newest = true, newest
	s.mu.Unlock()
	if j.onFlush != nil {
		j.onFlush()
	}
	start := time.Now()
	// A caller alone with other work to do (a prepare writes its CDI
	// spec) does it while the disk flushes; the callers of a batch wait
	// for the flush, which is then written synchronously (see aioWriter).
	alone := j.lastBatch == 1
	overlapped := alone && overlap
	waitFile, err := j.file.start(snapshot, overlapped)
	// end ends the flush; timed, it also counts the flush's duration in
	// the average (an overlapped flush would count the caller's work too;
	// a lone flush, as ever, is not timed).
	end := func(timed bool) error {
		if err == nil {
			err = waitFile()
		}
		if err != nil {
			err = fmt.Errorf("save checkpoint: %w", err)
		} else if !j.file.noFlush {
			j.syncs.Add(1)
			if timed {
				j.averageFlush(time.Since(start))
			}
		}
		j.lastEnd = time.Now()
		// The callers it served and those waiting for the next have not
		// left yet.
		j.lastWidth = j.calls()
		finish(true, newest, err)
		return err
	}
	if overlapped {
		return func() error { return end(false) }, true
	}
	err = end(!alone)
	return func() error { return err }, false
}

// enter counts a caller of sync of call (nil: a call of its own); leave
// uncounts it.
func (j *journal) enter(call *announced) {
	j.countMu.Lock()
	defer j.countMu.Unlock()
	j.counts.Add(countsOf(call != nil && call.syncing.Add(1) > 1))
}

func (j *journal) leave(call *announced) {
	j.countMu.Lock()
	defer j.countMu.Unlock()
	j.counts.Add(-countsOf(call != nil && call.syncing.Add(-1) > 0))
}

// sameCallUnit is one caller in the high half of journal.counts.
const sameCallUnit = 1 << 32

// countsOf is one caller in journal.counts, of a kubelet call with another
// caller in sync (same) or not.
func countsOf(same bool) int64 {
	if same {
		return 1 + sameCallUnit
	}
	return 1
}

// waiting is how many callers are in sync.
func (j *journal) waiting() int32 { return int32(j.counts.Load()) }

// calls is how many kubelet calls have callers in sync.
func (j *journal) calls() int32 {
	c := j.counts.Load()
	return int32(c) - int32(c>>32)
}

// averageFlush counts a flush of duration d in flushTime. The caller
// holds j.mu.
func (j *journal) averageFlush(d time.Duration) {
	if j.flushTime == 0 {
		j.flushTime = d
		return
	}
	j.flushTime += (d - j.flushTime) / 8
}

// wake tells a gathering flush that what it waits for may have changed.
func (j *journal) wake() {
	select {
	case j.arrived <- struct{}{}:
	default:
	}
}

// gather waits before a flush for more changes to share it (see journal).
// The caller holds j.mu.
func (s *State) gather(queued bool) {
	j := &s.journal
	if j.file.noFlush {
		// Without a flush to share (SkipSync) a wait only adds latency.
		return
	}
	wait := min(gatherFlushes*j.flushTime, j.maxGather)
	recent := time.Since(j.lastEnd) < j.streamGap
	// Before a flush was timed there is no time to guess with.
	shared := wait > 0 && (queued || (j.lastCalls > 1 && recent))
	if !shared && !s.expecting() {
		return
	}
	if j.onGather != nil {
		j.onGather()
	}
	stream := time.NewTimer(wait)
	defer stream.Stop()
	bound := time.NewTimer(j.maxGather)
	defer bound.Stop()
	// The guess ends once as many calls wait as were in sync when the
	// previous flush ended, if it was recent: the calls that come back
	// are all here.
	for (shared && (!recent || j.calls() < j.lastWidth)) || s.expecting() {
		select {
		case <-j.arrived:
		case <-stream.C:
			shared = false // only what is expected is waited for now
		case <-bound.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// expecting reports whether a change is expected that is not waiting for
// a flush yet: an announced claim not in the State, or an operation in
// flight that is not waiting and not programming (a programming job runs
// for seconds; its operation commits when it ends).
func (s *State) expecting() bool {
	j := &s.journal
	if j.incoming.Load() > 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for uid, op := range s.ops {
		select {
		case <-op.done:
			continue
		default:
		}
		// A spec rewrite (RefreshSpecs) commits nothing.
		if !op.refresh && !s.hasJobs(uid) {
			n++
		}
	}
	return n > int(j.waiting())
}

// expectKey is the context key of a kubelet call's announced claims.
type expectKey struct{}

// announced is a kubelet call's: how many of its announced claims have
// not reached the State yet, and how many of its callers are in sync.
type announced struct{ left, syncing atomic.Int32 }

// Expect announces a kubelet call of n claims, from when it arrives at the
// plugin (before the claims are read from the API server): a flush meanwhile
// waits for them, within its bound. Prepare and Unprepare with the returned
// context take one announced claim each when they enter the State; end
// withdraws the rest and must be called when the call returns.
func (s *State) Expect(ctx context.Context, n int) (context.Context, func()) {
	a := &announced{}
	a.left.Store(int32(n))
	s.journal.incoming.Add(int32(n))
	end := func() {
		for s.arrive(a) {
		}
	}
	return context.WithValue(ctx, expectKey{}, a), end
}

// callOf returns ctx's kubelet call (Expect), or nil.
func callOf(ctx context.Context) *announced {
	a, _ := ctx.Value(expectKey{}).(*announced)
	return a
}

// arrived takes one announced claim of ctx's call, if any.
func (s *State) arrived(ctx context.Context) {
	if a := callOf(ctx); a != nil {
		s.arrive(a)
	}
}

// arrive takes one of a's claims; false when none is left.
func (s *State) arrive(a *announced) bool {
	for {
		left := a.left.Load()
		if left <= 0 {
			return false
		}
		if a.left.CompareAndSwap(left, left-1) {
			s.journal.incoming.Add(-1)
			s.journal.wake()
			return true
		}
	}
}

// commit applies change and makes it durable: update, then sync (of
// call).
func (s *State) commit(call *announced, change func(cp *Checkpoint)) error {
	s.mu.Lock()
	gen := s.update(change)
	s.mu.Unlock()
	return s.sync(gen, call)
}
