// Package reconcile runs the workers of a rate-limited work queue, the
// loop every controller of the project shares: a worker takes a key, syncs
// it, forgets its backoff on success and puts it back with backoff on
// error. The queue never hands one key to two workers at once.
package reconcile

import (
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
)

// Run syncs the queue's keys with workers workers (at least one) until ctx
// ends; it then shuts the queue down and returns once every worker has
// finished its key. failed, when set, is told of each failed sync before
// the key is put back.
func Run[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], workers int, syncKey func(context.Context, T) error, failed func(context.Context, T, error)) {
	stop := context.AfterFunc(ctx, q.ShutDown)
	defer stop()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for next(ctx, q, syncKey, failed) {
			}
		})
	}
	wg.Wait()
}

// next syncs one key; false once the queue shut down.
func next[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], syncKey func(context.Context, T) error, failed func(context.Context, T, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := syncKey(ctx, key); err != nil {
		if failed != nil {
			failed(ctx, key, err)
		}
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
