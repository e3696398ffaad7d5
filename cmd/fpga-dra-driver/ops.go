package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
)

// serveMetrics serves /metrics (Prometheus) on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, m *drivermetrics.Metrics) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", lis.Addr().String())
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server stopped")
		}
	}()
	return nil
}

// serveLiveness serves the gRPC liveness probe for a running DRA plugin.
func serveLiveness(ctx context.Context, addr string, d *draplugin.Driver) {
	go func() {
		if err := draplugin.ServeLiveness(ctx, addr, draplugin.NewLiveness(d.RegistrarSocket(), d.DRASocket())); err != nil {
			klog.FromContext(ctx).Error(err, "Liveness probe server stopped")
		}
	}()
}
