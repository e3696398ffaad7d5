package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// probes are the checks behind /healthz and /readyz.
type probes struct {
	live  func() error
	ready func() error
}

// serveHTTP serves /metrics (Prometheus), /healthz (the process works: for
// a leader, its lease is renewed) and /readyz (the webhook has a serving
// certificate) on listener until ctx is done.
func serveHTTP(ctx context.Context, listener net.Listener, p *probes) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	mux.HandleFunc("/healthz", check(p.live))
	mux.HandleFunc("/readyz", check(p.ready))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	klog.FromContext(ctx).Info("Serving metrics and probes", "address", listener.Addr().String())
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics and probes: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics and probes: %w", err)
	}
	return nil
}

// check answers 200 "ok" when probe passes, else 503 with the reason.
func check(probe func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if err := probe(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}
}
