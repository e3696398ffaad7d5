package draplugin_test

import (
	"context"
	"os"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func TestLiveness(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 1}})
	l := draplugin.NewLiveness(n.driver.RegistrarSocket(), n.driver.DRASocket())
	check := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := l.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status
	}
	if got := check(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("live plugin: %v, want SERVING", got)
	}
	if err := os.Remove(n.driver.DRASocket()); err != nil {
		t.Fatal(err)
	}
	if got := check(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("DRA socket gone: %v, want NOT_SERVING", got)
	}
}
