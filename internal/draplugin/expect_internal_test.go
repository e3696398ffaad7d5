package draplugin

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// countingExpecter is a ClaimPreparer that counts the claims announced to
// it (CommitExpecter); nothing else of it is called.
type countingExpecter struct {
	ClaimPreparer
	announced atomic.Int32
}

func (e *countingExpecter) Expect(ctx context.Context, claims int) (context.Context, func()) {
	e.announced.Add(int32(claims))
	return ctx, func() {}
}

// TestCallsAnnouncedBeforeAnyGoesOn: of calls whose handlers are ready to
// run together, every one is announced before any of them goes on to
// prepare, even on one CPU, where a handler runs until it blocks: a flush
// then finds the others expected and is shared with them. A handler that
// went straight on ran its prepare to the flush before the next call was
// announced, and flushed for its claim alone. Go's scheduler now and then
// runs a yielding goroutine again at once (one yield: 86-92 of 100 trials
// complete), so the handler yields twice (100 of 100 here), and the test
// asks for 90 of 100; a handler that does not yield completes none.
func TestCallsAnnouncedBeforeAnyGoesOn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const calls, trials = 8, 100
	complete := 0
	for range trials {
		e := &countingExpecter{}
		active := make(chan struct{})
		close(active)
		d := &Driver{active: active, claims: e}
		seen := make(chan int32, calls)
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				req := &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{{Uid: "uid"}}}
				_, _ = d.expectInterceptor(context.Background(), req, nil, func(context.Context, any) (any, error) {
					seen <- e.announced.Load()
					return nil, nil
				})
			})
		}
		wg.Wait()
		close(seen)
		first := <-seen
		if first == calls {
			complete++
		}
	}
	t.Logf("in %d of %d trials the first handler to go on found all %d calls announced", complete, trials, calls)
	if complete < trials*9/10 {
		t.Fatalf("in %d of %d trials the first handler to go on found all %d calls announced, want at least %d", complete, trials, calls, trials*9/10)
	}
}
