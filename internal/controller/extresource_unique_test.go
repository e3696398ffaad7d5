package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
)

// classesServing returns the names of the DeviceClasses in the fake API
// server whose extendedResourceName is name.
func (tc *testController) classesServing(t *testing.T, name string) []string {
	t.Helper()
	return tc.classNames(t, func(c *resourceapi.DeviceClass) bool {
		return c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == name
	})
}

// sameIDs returns the extended resource name of testIfID and testAFUID in
// the domain fpga.dra.dev, and two functions of those IDs: an af-mode one
// named older, and an hour younger a pinned region-mode one, nlb0-pinned.
func sameIDs(t *testing.T, older string) (string, *v1alpha1.AcceleratorFunction, *v1alpha1.AcceleratorFunction) {
	t.Helper()
	ern, err := extresource.AFName(testIfID, testAFUID)
	if err != nil {
		t.Fatal(err)
	}
	o := acceleratorFunction(older, v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID})
	o.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	n := acceleratorFunction("nlb0-pinned", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID,
		Mode: v1alpha1.ModeRegion, SHA256: testSHA256})
	n.CreationTimestamp = metav1.NewTime(o.CreationTimestamp.Add(time.Hour))
	return "fpga.dra.dev/" + ern, o, n
}

// TestExtendedResourceNameServedOnce: two AcceleratorFunctions of the same
// interface and AFU IDs (an unpinned af-mode name and a pinned region-mode
// one, say) must not both give their class the extended resource name: the
// API asks for it to be unique among DeviceClasses, and the scheduler
// otherwise serves it with whichever class was created last, so a pod
// written for the device plugin would silently switch from loaded ports
// (programming: Never) to a class that programs, or back, whenever a class
// is re-created. The oldest function serves it; once it is gone, the next
// one takes over.
func TestExtendedResourceNameServedOnce(t *testing.T) {
	ern, older, newer := sameIDs(t, "nlb0")

	tc := newTestController(t, nil, older, newer)
	tc.extendedResourceDomain = "fpga.dra.dev"
	ctx, cancel := context.WithCancel(tc.ctx)
	done := make(chan error, 1)
	go func() { done <- tc.Run(ctx, 2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() error = %v", err)
		}
	}()
	eventually(t, "the classes of both functions", func() bool {
		return cmp.Equal(tc.classNames(t), []string{"nlb0", "nlb0-pinned", "nlb0-pinned-program"}) &&
			meta.IsStatusConditionTrue(tc.getAF(t, "nlb0").Status.Conditions, v1alpha1.ConditionReady) &&
			meta.IsStatusConditionTrue(tc.getAF(t, "nlb0-pinned").Status.Conditions, v1alpha1.ConditionReady)
	})
	if got := tc.classesServing(t, ern); len(got) != 1 || got[0] != "nlb0" {
		t.Fatalf("DeviceClasses with extendedResourceName %s: %v, want only nlb0 (the oldest function)", ern, got)
	}

	// The holder goes: the other function's class takes the name over,
	// without a change of its own.
	if err := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource).Delete(tc.ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "nlb0-pinned to serve "+ern, func() bool {
		got := tc.classesServing(t, ern)
		return len(got) == 1 && got[0] == "nlb0-pinned"
	})
}

// TestExtendedResourceNameNotLostToAConflict: when the oldest function of
// some IDs cannot have its class (an FpgaRegion of the same name owns the
// DeviceClass), the next one must serve the extended resource name, not
// leave it to no class at all.
func TestExtendedResourceNameNotLostToAConflict(t *testing.T) {
	ern, older, newer := sameIDs(t, "shared")
	tc := newTestController(t, nil, older, newer, fpgaRegion("shared", testIfID))
	tc.extendedResourceDomain = "fpga.dra.dev"
	tc.startInformers(t)
	tc.syncRegion(t, "shared")
	tc.syncAF(t, "shared")
	tc.syncAF(t, "nlb0-pinned")
	if c := condition(t, tc.getAF(t, "shared").Status.Conditions, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonDeviceClassConflict {
		t.Fatalf("AcceleratorFunction shared Ready = %+v, want a class conflict", c)
	}
	if got := tc.classesServing(t, ern); len(got) != 1 || got[0] != "nlb0-pinned" {
		t.Fatalf("DeviceClasses with extendedResourceName %s: %v, want nlb0-pinned (the oldest function has no class)", ern, got)
	}
}
