package controller

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/claimroute"
)

// TestClaimRouter: a claim whose devices wait for binding conditions is
// labelled with its node; deallocated, it loses the label; claims of other
// drivers and claims without binding conditions are left alone.
func TestClaimRouter(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kube := fake.NewClientset()
	r, err := NewClaimRouter(testDriver, kube)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, 2) }()
	defer func() { cancel(); <-done }()

	allocated := func(name, driver string, conditions []string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		c.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"node-a"}}},
		}}}}
		c.Status.Allocation.Devices.Results = []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: driver, Pool: "node-a", Device: "d", BindingConditions: conditions}}
		return c
	}
	cond := []string{testDriver + "/programmed"}
	for _, c := range []*resourceapi.ResourceClaim{allocated("waits", testDriver, cond), allocated("plain", testDriver, nil), allocated("other", "gpu.example.com", cond)} {
		if _, err := kube.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	key := claimroute.Label(testDriver)
	label := func(name string) (string, bool) {
		c, err := kube.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := c.Labels[key]
		return v, ok
	}
	waitFor(t, "the waiting claim's label", func() bool { v, ok := label("waits"); return ok && v == "node-a" })
	// The router has handled the other two by now or will leave them alone
	// anyway; a later change proves it: deallocate the waiting claim.
	c, err := kube.ResourceV1().ResourceClaims("default").Get(ctx, "waits", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = nil
	if _, err := kube.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deallocated claim's label to go", func() bool { _, ok := label("waits"); return !ok })
	for _, name := range []string{"plain", "other"} {
		if v, ok := label(name); ok {
			t.Errorf("claim %s labelled %q", name, v)
		}
	}
}

// waitFor polls cond until it holds, at most 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
