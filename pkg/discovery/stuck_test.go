package discovery_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// wedge replaces an attribute with a FIFO (simnode.Wedge) until the test
// ends or it calls release.
func wedge(t *testing.T, path string) (release func()) {
	t.Helper()
	rel, err := simnode.Wedge(path)
	if err != nil {
		t.Fatal(err)
	}
	release = func() {
		if err := rel(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(release)
	return release
}

// checkReadAt checks that card stuck of res keeps the time of the pass
// that read it, stuckAt, and that every other card was read by res's pass.
func checkReadAt(t *testing.T, res *discovery.Result, stuck int, stuckAt time.Time) {
	t.Helper()
	for i, c := range res.Cards {
		want := res.Started
		if i == stuck {
			want = stuckAt
		}
		if !c.ReadAt().Equal(want) || want.IsZero() {
			t.Fatalf("card %d was read at %v; want %v (the pass began at %v; card %d is stuck since the pass of %v)", i, c.ReadAt(), want, res.Started, stuck, stuckAt)
		}
	}
}

func portHealth(t *testing.T, res *discovery.Result, card int) discovery.Health {
	t.Helper()
	if card >= len(res.Cards) || len(res.Cards[card].Ports) == 0 {
		t.Fatalf("card %d is missing: %+v", card, res.Cards)
	}
	return res.Cards[card].Ports[0].Health
}

// TestStuckReadIsBounded: a read of one card that never returns makes
// that card unhealthy with the cause, while the other cards keep being
// refreshed (their later changes are seen) and scanned; the stuck card is
// not read again until the stalled read returns, and is healthy after.
func TestStuckReadIsBounded(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 3, PortsPerCard: 1})
	s := &discovery.Scanner{Root: n.Root, ReadTimeout: 50 * time.Millisecond}
	res, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	stuck := filepath.Join(n.Cards[1].Ports[0].SysfsPath, "afu_id")
	release := wedge(t, stuck)

	res2, changed := s.Refresh(res)
	h := portHealth(t, res2, 1)
	if !changed || h.Healthy || h.Cause() != "read-of-afu_id-timed-out" || !strings.Contains(h.String(), "read of "+resolved(t, stuck)+" of card") {
		t.Fatalf("stuck card: changed %v, health %+v; want unhealthy, cause read-of-afu_id-timed-out", changed, h)
	}
	for _, c := range []int{0, 2} {
		if h := portHealth(t, res2, c); !h.Healthy {
			t.Fatalf("card %d is unhealthy beside a stuck card: %v", c, h)
		}
	}
	checkReadAt(t, res2, 1, res.Started)
	// A later change on another card is seen, and the stuck card is not
	// read again (its report, with the time it got stuck, stays).
	if err := n.SetPortErrors(n.Cards[2].Ports[0], "0x1"); err != nil {
		t.Fatal(err)
	}
	res3, _ := s.Refresh(res2)
	if h := portHealth(t, res3, 2); h.Healthy || h.Cause() != "port-errors-0x1" {
		t.Fatalf("change on card 2 while card 1 is stuck: %+v", h)
	}
	if got := portHealth(t, res3, 1); got.String() != h.String() {
		t.Fatalf("the stuck card was read again: %q, then %q", h, got)
	}
	full, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Cards) != 3 || portHealth(t, full, 1).String() != h.String() || !portHealth(t, full, 0).Healthy {
		t.Fatalf("full scan while card 1 is stuck: %d cards, card 1 %v", len(full.Cards), portHealth(t, full, 1))
	}
	checkReadAt(t, full, 1, res.Started)

	release()
	if err := n.SetPortErrors(n.Cards[2].Ports[0], "0x0"); err != nil {
		t.Fatal(err)
	}
	// The stalled read returns on its own goroutine and clears the mark;
	// the next passes read the card again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res4, _ := s.Refresh(res3)
		if portHealth(t, res4, 1).Healthy && portHealth(t, res4, 2).Healthy {
			// Read again, the card is as recent as the pass, and no
			// longer reported changed.
			checkReadAt(t, res4, -1, time.Time{})
			if _, changed := s.Refresh(res4); changed {
				t.Fatal("a refresh after the card recovered reports a change where there is none")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("card 1 never recovered: %v", portHealth(t, res4, 1))
		}
		res3 = res4
	}
}

// TestStuckFirstScan: a card stuck in the first scan is left out with an
// error naming the attribute by its path (which port of the card); the
// others are found.
func TestStuckFirstScan(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverOPAE, Cards: 2, PortsPerCard: 2})
	stuck := filepath.Join(n.Cards[0].Ports[1].SysfsPath, "afu_id")
	wedge(t, stuck)
	res, err := (&discovery.Scanner{Root: n.Root, ReadTimeout: 50 * time.Millisecond}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cards) != 1 || res.Cards[0].PCIAddress != n.Cards[1].PCIAddress {
		t.Fatalf("found %+v, want card %s alone", res.Cards, n.Cards[1].PCIAddress)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Error(), "read of "+resolved(t, stuck)+" timed out") {
		t.Fatalf("errors %v, want the stuck read of %s named", res.Errors, stuck)
	}
}

// resolved is path with the symbolic links of its directory resolved, as
// discovery reaches it.
func resolved(t *testing.T, path string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, filepath.Base(path))
}

// TestScanStopsWithItsContext: a scan stuck on a read returns once its
// context ends, however long the read timeout.
func TestScanStopsWithItsContext(t *testing.T) {
	n := writeNode(t, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	afu := filepath.Join(n.Cards[0].Ports[0].SysfsPath, "afu_id")
	wedge(t, afu)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := (&discovery.Scanner{Root: n.Root, ReadTimeout: time.Hour}).ScanContext(ctx)
		done <- err
	}()
	// The scan reached the FIFO once a writer's open returns.
	w, err := os.OpenFile(afu, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("scan after its context ended: %v, want context.Canceled", err)
	}
}

// TestReadBoundedOnePendingReadPerFile: a read that outlasts its timeout
// fails with ErrReadTimedOut and leaves its file pending; until it
// returns, reads of that file fail at once without calling read, reads of
// other files go on, and once it returns the file is read again.
func TestReadBoundedOnePendingReadPerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "afu_id")
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	calls := 0
	stuck := func() (string, error) {
		calls++
		<-release
		return "late", nil
	}
	ctx := context.Background()
	_, err := discovery.ReadBounded(ctx, path, time.Millisecond, stuck)
	if !errors.Is(err, discovery.ErrReadTimedOut) || !strings.Contains(err.Error(), "read of "+path+" timed out after 1ms") {
		t.Fatalf("stuck read: %v, want it to time out naming the file and the bound", err)
	}
	for range 3 {
		_, err := discovery.ReadBounded(ctx, path, time.Hour, stuck)
		if !errors.Is(err, discovery.ErrReadTimedOut) || !strings.Contains(err.Error(), "an earlier read has been stuck since") {
			t.Fatalf("read while one is stuck: %v", err)
		}
	}
	if v, err := discovery.ReadBounded(ctx, path+"2", time.Hour, func() (string, error) { return "other", nil }); v != "other" || err != nil {
		t.Fatalf("another file beside a stuck one: %q, %v", v, err)
	}
	close(release)
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := discovery.ReadBounded(ctx, path, time.Hour, func() (string, error) { return "again", nil })
		if err == nil && v == "again" {
			break
		}
		if !errors.Is(err, discovery.ErrReadTimedOut) || time.Now().After(deadline) {
			t.Fatalf("read after the stuck one returned: %q, %v", v, err)
		}
		runtime.Gosched()
	}
	if calls != 1 {
		t.Fatalf("the stuck file was read %d times, want once", calls)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := discovery.ReadBounded(cancelled, path, time.Hour, stuck); !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("read with an ended context: %v after %d calls, want context.Canceled and no read", err, calls)
	}
}

// TestReadBoundedConcurrentCallersShareOneRead: callers that read one
// stuck file at the same time call read once between them, all fail with
// ErrReadTimedOut, and a read of the file that is under way (not stuck)
// is waited for, not doubled.
func TestReadBoundedConcurrentCallersShareOneRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "afu_id")
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	stuck := func() (string, error) {
		calls.Add(1)
		<-release
		return "late", nil
	}
	const callers = 16
	var ready, wg sync.WaitGroup
	ready.Add(callers)
	start := make(chan struct{})
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			ready.Done()
			<-start
			_, err := discovery.ReadBounded(context.Background(), path, 50*time.Millisecond, stuck)
			errs <- err
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, discovery.ErrReadTimedOut) {
			t.Fatalf("concurrent read of a stuck file: %v, want ErrReadTimedOut", err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d callers at once read the stuck file %d times, want once", callers, n)
	}

	// A slow read that returns in time: a second caller waits for it and
	// then reads on its own.
	slow := filepath.Join(t.TempDir(), "afu_id")
	entered, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := discovery.ReadBounded(context.Background(), slow, time.Hour, func() (string, error) {
			close(entered)
			<-finish
			return "first", nil
		})
		first <- err
	}()
	<-entered
	second := readAfter(slow, finish)
	runtime.Gosched()
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second read: %v, want its own result", err)
	}
}

// readAfter starts a ReadBounded of path whose own read fails unless
// ended is closed (the read of path before it has returned), and returns
// its outcome: nil when it read on its own.
func readAfter(path string, ended <-chan struct{}) <-chan error {
	out := make(chan error, 1)
	go func() {
		v, err := discovery.ReadBounded(context.Background(), path, time.Hour, func() (string, error) {
			select {
			case <-ended:
				return "own", nil
			default:
				return "", errors.New("read while the earlier read of the file was under way")
			}
		})
		if err == nil && v != "own" {
			err = fmt.Errorf("read %q, want its own result", v)
		}
		out <- err
	}()
	return out
}

// TestReadBoundedAbandonedEarlyIsNotStuck: a read whose caller's ctx
// ended before a whole timeout passed does not mark the file stuck: the
// next caller waits for that read, then reads on its own. Once such a read
// has run a whole timeout of the caller that finds it, the file counts as
// stuck.
func TestReadBoundedAbandonedEarlyIsNotStuck(t *testing.T) {
	dir := t.TempDir()
	release := make(chan struct{})
	// abandonEarly starts a read of path that blocks until release and
	// makes its caller give up (ctx cancelled) once the read runs.
	abandonEarly := func(path string) {
		entered := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan error, 1)
		go func() {
			_, err := discovery.ReadBounded(ctx, path, time.Hour, func() (string, error) {
				close(entered)
				<-release
				return "first", nil
			})
			first <- err
		}()
		<-entered
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("caller whose context ended: %v, want context.Canceled", err)
		}
	}
	slow, outrun := filepath.Join(dir, "afu_id"), filepath.Join(dir, "xclbinuuid")
	abandonEarly(slow)
	abandonEarly(outrun)
	started := time.Now()

	second := readAfter(slow, release)
	// A caller whose timeout the abandoned read has outrun finds the file
	// stuck.
	for time.Since(started) < 2*time.Millisecond {
		runtime.Gosched()
	}
	if _, err := discovery.ReadBounded(context.Background(), outrun, time.Millisecond, func() (string, error) { return "", errors.New("read of a stuck file") }); !errors.Is(err, discovery.ErrReadTimedOut) || !strings.Contains(err.Error(), "stuck since") {
		t.Fatalf("caller with a timeout the abandoned read outran: %v, want it stuck", err)
	}
	close(release)
	if err := <-second; err != nil {
		t.Fatalf("caller after a read abandoned early: %v, want its own read once that one returned", err)
	}
}
