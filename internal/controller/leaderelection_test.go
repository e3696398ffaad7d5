package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

// TestRunLeaderElected checks that the replica takes the Lease, leads, and
// releases the Lease when stopped, after lead returned.
func TestRunLeaderElected(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := kubefake.NewClientset()
	leading, stopped := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- RunLeaderElected(ctx, LeaderElection{
			Client: client, Namespace: "fpga-system", Name: "fpga-dra-controller", Identity: "replica-a",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		}, func(ctx context.Context) {
			close(leading)
			<-ctx.Done()
			close(stopped)
		})
	}()
	<-leading
	lease, err := client.CoordinationV1().Leases("fpga-system").Get(ctx, "fpga-dra-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "replica-a" {
		t.Errorf("Lease holder = %v, want replica-a", lease.Spec.HolderIdentity)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("RunLeaderElected() error = %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("RunLeaderElected returned before lead did")
	}
	lease, err = client.CoordinationV1().Leases("fpga-system").Get(context.Background(), "fpga-dra-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Lease: %v", err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		t.Errorf("Lease holder after stopping = %q, want it released", *lease.Spec.HolderIdentity)
	}
}
