package state

import (
	"sync"
	"testing"
)

// TestCallsNeverOvercounted: callers of one kubelet call entering and
// leaving sync at once are never counted as callers of two calls (a
// flush that found another call's caller queued waits its whole gather
// bound for that call's changes), and leave no count behind.
func TestCallsNeverOvercounted(t *testing.T) {
	var j journal
	call := &announced{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				j.enter(call)
				j.leave(call)
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
		if c := j.counts.Load(); c != 0 {
			t.Errorf("counts %#x once every caller left, want 0", c)
		}
	}()
	for range 2_000_000 {
		if c := j.calls(); c > 1 {
			t.Fatalf("%d calls counted, all callers are of one call", c)
		}
	}
}
