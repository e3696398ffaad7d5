package main

import (
	"context"
	"net"
	"net/http"

	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/fpga-dra/fpga-dra-driver/internal/metricsserver"
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
	return metricsserver.Serve(ctx, listener, legacyregistry.DefaultGatherer, map[string]http.Handler{
		"/healthz": check(p.live),
		"/readyz":  check(p.ready),
	})
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
