package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestPinnedFunctionLoadedClassCarriesThePin: the NAME class of an
// AcceleratorFunction that pins its bitstream (sha256 or a digest-pinned
// bitstreamRef) carries the pin with programming IfNeeded: a port whose
// afu_id reads the AFU ID, whatever file (another tenant's, an older
// build) put it there, is not handed out as is (programming: Never
// compares afu_id only). Since checking the pin may mean programming, the
// class selects only ports of nodes that allow it; an unpinned function's
// NAME class still selects loaded ports on any node.
func TestPinnedFunctionLoadedClassCarriesThePin(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	if len(portsWith(res, testAFUID)) == 0 {
		t.Fatalf("no port carries %s", testAFUID)
	}
	for _, spec := range []v1alpha1.AcceleratorFunctionSpec{
		{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion, Bitstream: "nlb-a.gbs", SHA256: testSHA256},
		{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion,
			BitstreamRef: "registry.example.com/accel/nlb-a:v2@sha256:" + testSHA256},
	} {
		classes := classesFor(t, []*v1alpha1.AcceleratorFunction{acceleratorFunction("nlb-a", spec)}, nil)
		got := allocate(t, publishedSlices(t, n, res, testNode, true), classes, nil, firstAvailableClaim("nlb-a"))
		if got == nil {
			t.Fatal("no allocation")
		}
		cfg := got.configs[0]
		if got.requests[0] != "fpga/loaded" || cfg.SHA256 != spec.SHA256 || cfg.BitstreamRef != spec.BitstreamRef || cfg.Programming != v1alpha1.ProgrammingIfNeeded {
			t.Errorf("pinned function (sha256 %q, bitstreamRef %q): request %s got %s with config %+v; want the loaded class with the pin, IfNeeded",
				spec.SHA256, spec.BitstreamRef, got.requests[0], got.devices[0], *cfg)
		}
		if got := allocate(t, publishedSlices(t, n, res, testNode, false), classes, nil, firstAvailableClaim("nlb-a")); got != nil {
			t.Errorf("pinned function on a node that forbids programming: request %s got %s; want none (the pin cannot be checked there)", got.requests[0], got.devices[0])
		}
	}
	unpinned := classesFor(t, []*v1alpha1.AcceleratorFunction{acceleratorFunction("nlb-a", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion})}, nil)
	if got := allocate(t, publishedSlices(t, n, res, testNode, false), unpinned, nil, firstAvailableClaim("nlb-a")); got == nil || got.requests[0] != "fpga/loaded" {
		t.Errorf("unpinned function on a node that forbids programming: %+v, want a loaded port", got)
	}
}

// TestDeletionCreatesNoClasses: an AcceleratorFunction or FpgaRegion being
// deleted in the foreground (the garbage collector's foregroundDeletion
// finalizer; kubectl delete --cascade=foreground, Argo CD's prune) gets no
// classes created: the controller does not fight the garbage collector.
func TestDeletionCreatesNoClasses(t *testing.T) {
	now := metav1.Now()
	deleting := func(o metav1.Object) {
		o.SetDeletionTimestamp(&now)
		o.SetFinalizers([]string{metav1.FinalizerDeleteDependents})
	}
	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion})
	deleting(af)
	region := fpgaRegion("pac-a10", testIfID)
	deleting(region)
	for _, tc := range []struct {
		what string
		obj  runtime.Object
		sync func(tc *testController)
	}{
		{"AcceleratorFunction nlb0", af, func(tc *testController) { tc.syncAF(t, "nlb0") }},
		{"FpgaRegion pac-a10", region, func(tc *testController) { tc.syncRegion(t, "pac-a10") }},
	} {
		// The garbage collector has just deleted the dependents.
		c := newTestController(t, nil, tc.obj)
		c.startInformers(t)
		tc.sync(c)
		if names := c.classNames(t); len(names) != 0 {
			t.Errorf("%s is being deleted (finalizer %s), yet the controller created DeviceClasses %v", tc.what, metav1.FinalizerDeleteDependents, names)
		}
	}
}
