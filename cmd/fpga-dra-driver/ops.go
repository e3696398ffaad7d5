package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/metricsserver"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
)

// serveMetrics serves /metrics (Prometheus) on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, m *drivermetrics.Metrics) error {
	return listen(ctx, addr, "metrics", func(lis net.Listener) error {
		return metricsserver.Serve(ctx, lis, m.Registry(), nil)
	})
}

// serveLiveness serves the gRPC liveness probe for a running DRA plugin.
func serveLiveness(ctx context.Context, addr string, d *draplugin.Driver) error {
	return listen(ctx, addr, "gRPC liveness probe", func(lis net.Listener) error {
		return draplugin.ServeLiveness(ctx, lis, draplugin.NewLiveness(d.RegistrarSocket(), d.DRASocket()))
	})
}

// listen listens on the TCP address addr and serves what on it in the
// background until ctx ends. An address in use is waited for: on the
// host network, the previous version's pod holds it during a rolling
// update until it stops. Any other error is returned.
func listen(ctx context.Context, addr, what string, serve func(net.Listener) error) error {
	logger := klog.FromContext(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s listener %s: %w", what, addr, err)
	}
	go func() {
		if err != nil {
			logger.Info("Address in use, waiting for it (the previous instance of this driver during a rolling update?)", "server", what, "address", addr)
			ticker := time.NewTicker(flock.Retry)
			defer ticker.Stop()
			for err != nil {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
				if lis, err = net.Listen("tcp", addr); err != nil && !errors.Is(err, syscall.EADDRINUSE) {
					logger.Error(err, "Server not started", "server", what, "address", addr)
					return
				}
			}
		}
		logger.Info("Serving", "server", what, "address", lis.Addr().String())
		if err := serve(lis); err != nil {
			logger.Error(err, "Server stopped", "server", what, "address", addr)
		}
	}()
	return nil
}
