package metricsserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
)

// TestServe: /metrics answers with the gatherer's metrics, the extra
// handlers answer at their paths, and Serve returns nil once ctx ends.
func TestServe(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	c := metrics.NewCounter(&metrics.CounterOpts{Name: "test_total", Help: "A test counter.", StabilityLevel: metrics.ALPHA})
	reg.MustRegister(c)
	c.Inc()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, lis, reg, map[string]http.Handler{
			"/healthz": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		})
	}()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get("http://" + lis.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(body)
	}
	if body := get("/metrics"); !strings.Contains(body, "test_total 1") {
		t.Errorf("/metrics without test_total 1:\n%s", body)
	}
	if body := get("/healthz"); body != "ok" {
		t.Errorf("/healthz: %q, want ok", body)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after ctx ended: %v, want nil", err)
	}
}

// TestServeReportsAClosedListener: serving that stops before ctx ends is
// an error.
func TestServeReportsAClosedListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if err := Serve(context.Background(), lis, metrics.NewKubeRegistry(), nil); err == nil {
		t.Error("Serve on a closed listener returned nil")
	}
}
