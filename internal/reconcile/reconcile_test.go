package reconcile_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/fpga-dra/fpga-dra-driver/internal/reconcile"
)

// TestRunRetriesFailuresAndNeverSyncsAKeyTwiceAtOnce: a failing key comes
// back until it succeeds, then its backoff is forgotten; a key added
// again while a worker syncs it waits for that worker; Run returns once
// ctx ends.
func TestRunRetriesFailuresAndNeverSyncsAKeyTwiceAtOnce(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](0, 0))
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		syncs    = map[string]int{}
		failures atomic.Int32
	)
	const rounds = 200
	done := make(chan struct{})
	syncKey := func(_ context.Context, key string) error {
		mu.Lock()
		if inFlight[key] {
			mu.Unlock()
			t.Errorf("key %s synced by two workers at once", key)
			return nil
		}
		inFlight[key] = true
		syncs[key]++
		n := syncs[key]
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight[key] = false
			mu.Unlock()
		}()
		q.Add(key) // added again while being synced
		if key == "flaky" && n <= 3 {
			return errors.New("not yet")
		}
		if key == "steady" && n == rounds {
			close(done)
		}
		return nil
	}
	failed := func(context.Context, string, error) { failures.Add(1) }
	q.Add("flaky")
	q.Add("steady")
	ran := make(chan struct{})
	go func() {
		reconcile.Run(ctx, q, 4, syncKey, failed)
		close(ran)
	}()
	<-done
	cancel()
	<-ran
	if got := failures.Load(); got != 3 {
		t.Errorf("failed called %d times, want 3", got)
	}
	if n := q.NumRequeues("flaky"); n != 0 {
		t.Errorf("flaky's backoff not forgotten after success: %d requeues", n)
	}
	if !q.ShuttingDown() {
		t.Error("the queue was not shut down when ctx ended")
	}
}
