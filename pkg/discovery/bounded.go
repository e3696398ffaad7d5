package discovery

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultReadTimeout bounds how long the reads of one card may take in one
// pass (see Scanner.ReadTimeout). A sysfs read takes microseconds; one
// that takes seconds is a wedged device or driver.
const DefaultReadTimeout = 5 * time.Second

// Tracker records which attribute a card's reads are at, so that a read
// that stalls can be named by its whole path (a card's reads span its
// functions and ports). It takes no allocation per read.
type Tracker struct {
	mu        sync.Mutex
	dir, name string
}

// At notes that the attribute name in the directory dir ("" when name is
// a whole path), or the directory dir itself (name ""), is being read. A
// nil Tracker notes nothing.
func (t *Tracker) At(dir, name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.dir, t.name = dir, name
	t.mu.Unlock()
}

// current is the path of the attribute noted last ("" when none).
func (t *Tracker) current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dir == "" || t.name == "" {
		return t.dir + t.name
	}
	return t.dir + "/" + t.name
}

// stuckRead is a card whose reads outlasted the timeout and have not
// returned yet.
type stuckRead struct {
	attr  string
	since time.Time
}

// health is the verdict on every port of a card whose read is stuck.
func (r stuckRead) health(addr string, timeout time.Duration) Health {
	var h Health
	attr := r.attr
	if attr == "" {
		attr = "sysfs"
	}
	h.Fail(stuckCause(attr), "read of %s of card %s timed out after %s (stuck since %s): the card is not read again until that read returns",
		attr, addr, timeout, r.since.UTC().Format(time.RFC3339))
	return h
}

// stuckCause is the label-value cause of a stalled read of attr:
// "read-of-<attr>-timed-out".
func stuckCause(attr string) string {
	name := attr[strings.LastIndexByte(attr, '/')+1:]
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-' {
			b.WriteRune(r)
		}
	}
	name = strings.Trim(b.String(), "._-")
	const fixed = len("read-of--timed-out")
	if len(name) > 63-fixed {
		name = name[:63-fixed]
	}
	if name == "" {
		return "read-timed-out"
	}
	return "read-of-" + name + "-timed-out"
}

// boundedMap calls f(i) for i in 0..n-1, each on its own goroutine and as
// many at once as the process may run, and waits for each call at most
// timeout after it started (no bound when timeout <= 0) and while ctx
// lasts. It returns each call's result and whether it returned in time. A
// call past its deadline is abandoned: the next call takes its place, and
// once it returns, late (when set) gets its result on the abandoned
// goroutine; the caller never sees it. When ctx ends, every call still
// running is abandoned and no further call starts.
func boundedMap[T any](ctx context.Context, n int, timeout time.Duration, f func(i int) T, late func(i int, v T)) (results []T, done, left []bool) {
	results = make([]T, n)
	done = make([]bool, n)
	left = make([]bool, n)
	if n == 0 {
		return results, done, left
	}
	type item struct {
		i int
		v T
	}
	const (
		running int32 = iota
		returned
		abandoned
	)
	states := make([]atomic.Int32, n)
	ch := make(chan item, n)
	deadlines := map[int]time.Time{}
	workers := max(runtime.GOMAXPROCS(0), 1)
	next, finished := 0, 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for finished < n {
		for len(deadlines) < workers && next < n {
			i := next
			next++
			deadlines[i] = time.Now().Add(timeout)
			go func() {
				v := f(i)
				if states[i].CompareAndSwap(running, returned) {
					ch <- item{i, v}
				} else if late != nil {
					late(i, v)
				}
			}()
		}
		var wake <-chan time.Time
		if timeout > 0 {
			earliest := time.Time{}
			for _, d := range deadlines {
				if earliest.IsZero() || d.Before(earliest) {
					earliest = d
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(time.Until(earliest))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			for i := range deadlines {
				left[i] = states[i].CompareAndSwap(running, abandoned)
			}
			for len(ch) > 0 { // returned before the abandonment
				it := <-ch
				results[it.i], done[it.i] = it.v, true
			}
			return results, done, left
		case it := <-ch:
			results[it.i], done[it.i] = it.v, true
			delete(deadlines, it.i)
			finished++
		case now := <-wake:
			for i, d := range deadlines {
				if !now.Before(d) && states[i].CompareAndSwap(running, abandoned) {
					left[i] = true
					delete(deadlines, i)
					finished++
				}
			}
		}
	}
	return results, done, left
}

// timedOut describes a card whose read did not return in time.
func timedOut(addr, attr string, timeout time.Duration) error {
	if attr == "" {
		attr = "its sysfs directory"
	}
	return fmt.Errorf("card %s: read of %s %w after %s: the card is left out until that read returns", addr, attr, ErrReadTimedOut, timeout)
}

// ErrReadTimedOut is matched by the error of a ReadBounded that stopped
// waiting for a read that outlasted its timeout, or that found an earlier
// read of the same file still stuck. Its text is "timed out".
var ErrReadTimedOut = errors.New("timed out")

// fileReads holds the files (by path) that a ReadBounded read is under
// way on, or was abandoned on and has not returned from yet.
var fileReads struct {
	mu sync.Mutex
	m  map[string]*fileRead
}

// fileRead is one ReadBounded read of a file.
type fileRead struct {
	done    chan struct{} // closed when read returns
	started time.Time
	// abandoned: its caller stopped waiting for it; since: when it was
	// found stuck, having run a whole timeout (zero until then). Guarded
	// by fileReads.mu.
	abandoned bool
	since     time.Time
}

// ReadBounded runs read, a read of the file at path that may block in the
// kernel (a wedged device, a FIFO), on a goroutine of its own, and waits
// for it at most timeout (DefaultReadTimeout when <= 0) and while ctx
// lasts. It returns read's result when read returns in time. Otherwise it
// abandons read, which goes on until the kernel lets it return, and
// fails: with an error matching ErrReadTimedOut and naming path and
// timeout, or one wrapping context.Cause(ctx) when ctx ended first.
//
// One read of a file runs at a time: a ReadBounded of path while another
// one's read of it is under way waits for that read to return (within its
// own bounds) before it calls its own. A read that has run a whole
// timeout without returning, once abandoned, leaves path stuck until it
// returns; meanwhile every ReadBounded of path that starts fails at once
// with ErrReadTimedOut and does not call read. A read abandoned sooner
// (its caller's ctx ended, or its caller spent part of its timeout
// waiting for another read) does not mark path stuck until it has run a
// whole timeout of the caller that finds it. So a stuck file holds at
// most one goroutine however often, and by however many callers at once,
// it is polled, and a slow but sound file is not taken for a stuck one.
// A ctx that has ended already fails it without calling read. The
// discovery passes bound their reads the same way (see
// Scanner.ReadTimeout).
func ReadBounded[T any](ctx context.Context, path string, timeout time.Duration, read func() (T, error)) (T, error) {
	var zero T
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	gaveUp := func() (T, error) {
		return zero, fmt.Errorf("read of %s: gave up waiting: %w", path, context.Cause(ctx))
	}
	if ctx.Err() != nil {
		return gaveUp()
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timedOut := func() (T, error) {
		return zero, fmt.Errorf("read of %s %w after %s: the read is abandoned, and the file is not read again until it returns", path, ErrReadTimedOut, timeout)
	}
	var mine *fileRead
	for mine == nil {
		fileReads.mu.Lock()
		other := fileReads.m[path]
		switch {
		case other == nil:
			mine = &fileRead{done: make(chan struct{}), started: time.Now()}
			if fileReads.m == nil {
				fileReads.m = map[string]*fileRead{}
			}
			fileReads.m[path] = mine
		case !other.since.IsZero() || other.abandoned && time.Since(other.started) >= timeout:
			if other.since.IsZero() {
				other.since = time.Now()
			}
			since := other.since
			fileReads.mu.Unlock()
			return zero, fmt.Errorf("read of %s %w: an earlier read has been stuck since %s: the file is not read again until that read returns",
				path, ErrReadTimedOut, since.UTC().Format(time.RFC3339))
		}
		fileReads.mu.Unlock()
		if mine != nil {
			break
		}
		select {
		case <-other.done:
		case <-ctx.Done():
			return gaveUp()
		case <-timer.C:
			return zero, fmt.Errorf("read of %s %w after %s waiting for another read of it to return", path, ErrReadTimedOut, timeout)
		}
	}
	type outcome struct {
		v   T
		err error
	}
	result := make(chan outcome, 1)
	go func() {
		v, err := read()
		result <- outcome{v, err}
		fileReads.mu.Lock()
		delete(fileReads.m, path)
		fileReads.mu.Unlock()
		close(mine.done)
	}()
	var abandon func() (T, error)
	select {
	case o := <-result:
		return o.v, o.err
	case <-ctx.Done():
		abandon = gaveUp
	case <-timer.C:
		abandon = timedOut
	}
	fileReads.mu.Lock()
	defer fileReads.mu.Unlock()
	select {
	case o := <-result:
		// It returned as the wait ended.
		return o.v, o.err
	default:
	}
	mine.abandoned = true
	if time.Since(mine.started) >= timeout {
		mine.since = time.Now()
	}
	return abandon()
}
