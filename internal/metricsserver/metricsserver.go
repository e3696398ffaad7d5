// Package metricsserver is the HTTP server on which both binaries serve
// their Prometheus metrics (/metrics), beside any probes they have.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
)

// shutdownWait bounds how long Serve waits for requests in flight once
// ctx ends.
const shutdownWait = 5 * time.Second

// Handler serves the metrics of g in the Prometheus text format; a metric
// that fails to gather is left out, not the whole answer.
func Handler(g metrics.Gatherer) http.Handler {
	return metrics.HandlerFor(g, metrics.HandlerOpts{ErrorHandling: metrics.ContinueOnError})
}

// Serve serves /metrics of g, and each of handlers at its path, on lis
// until ctx ends, then shuts the server down. It returns nil after that
// shutdown, or the error that stopped serving before it.
func Serve(ctx context.Context, lis net.Listener, g metrics.Gatherer, handlers map[string]http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(g))
	for path, h := range handlers {
		mux.Handle(path, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	klog.FromContext(ctx).Info("Serving metrics", "address", lis.Addr().String())
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWait)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics on %s: %w", lis.Addr(), err)
	}
	return nil
}
