package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func (tc *testController) getRegion(t *testing.T, name string) *v1alpha1.FpgaRegion {
	t.Helper()
	u, err := tc.dyn.Resource(v1alpha1.FpgaRegionsResource).Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get FpgaRegion %s: %v", name, err)
	}
	r := &v1alpha1.FpgaRegion{}
	if err := fromUnstructured(u, r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (tc *testController) syncRegion(t *testing.T, name string) {
	t.Helper()
	tc.settle(t)
	if err := tc.sync(tc.ctx, key{kind: v1alpha1.FpgaRegionKind, name: name}); err != nil {
		t.Fatalf("sync FpgaRegion %s: %v", name, err)
	}
}

// TestFpgaRegionLifecycle creates, counts, updates and deletes an
// FpgaRegion.
func TestFpgaRegionLifecycle(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	var slices []runtime.Object
	for _, s := range publishedSlices(t, n, res, testNode, true) {
		slices = append(slices, s)
	}
	tc := newTestController(t, slices, fpgaRegion("pac-a10", testIfID))
	tc.startInformers(t)
	tc.syncRegion(t, "pac-a10")

	class := tc.class(t, "pac-a10")
	if got, want := class.Spec.Selectors[0].CEL.Expression, ProgrammableSelector(testDriver, testIfID); got != want {
		t.Errorf("selector = %s, want %s", got, want)
	}
	if len(class.Spec.Config) != 0 {
		t.Errorf("config = %+v, want none: the claim names the function", class.Spec.Config)
	}
	if ref := metav1.GetControllerOf(class); ref == nil || ref.Kind != v1alpha1.FpgaRegionKind || ref.Name != "pac-a10" {
		t.Errorf("controller = %+v", ref)
	}
	got := tc.getRegion(t, "pac-a10")
	if got.Status.Devices != int32(len(portsWith(res, ""))) || got.Status.DeviceClass != "pac-a10" || got.Status.ObservedGeneration != 1 {
		t.Errorf("status = %+v", got.Status)
	}
	if c := condition(t, got.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}

	// Another interface ID: nothing matches any more.
	got.Spec.InterfaceID, got.Generation = otherIfID, 2
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(got)
	if err != nil {
		t.Fatal(err)
	}
	u := tc.getUnstructured(t, v1alpha1.FpgaRegionsResource, "pac-a10")
	u.Object = content
	if _, err := tc.dyn.Resource(v1alpha1.FpgaRegionsResource).Update(tc.ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.syncRegion(t, "pac-a10")
	if got, want := tc.class(t, "pac-a10").Spec.Selectors[0].CEL.Expression, ProgrammableSelector(testDriver, otherIfID); got != want {
		t.Errorf("selector after the update = %s, want %s", got, want)
	}
	got = tc.getRegion(t, "pac-a10")
	if got.Status.Devices != 0 || got.Status.ObservedGeneration != 2 {
		t.Errorf("status after the update = %+v", got.Status)
	}
	if c := condition(t, got.Status.Conditions, v1alpha1.ConditionDevicesAvailable); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoDevices {
		t.Errorf("DevicesAvailable = %+v", c)
	}

	if err := tc.dyn.Resource(v1alpha1.FpgaRegionsResource).Delete(tc.ctx, "pac-a10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.syncRegion(t, "pac-a10")
	if diff := cmp.Diff([]string(nil), tc.classNames(t)); diff != "" {
		t.Errorf("DeviceClasses after the delete (-want +got):\n%s", diff)
	}
}

// TestFpgaRegionAndFunctionShareNoName checks that an FpgaRegion and an
// AcceleratorFunction of the same name do not fight over the DeviceClass:
// the first keeps it, the second reports the conflict.
func TestFpgaRegionAndFunctionShareNoName(t *testing.T) {
	tc := newTestController(t, nil,
		acceleratorFunction("shared", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID}),
		fpgaRegion("shared", testIfID))
	tc.startInformers(t)
	tc.syncAF(t, "shared")
	tc.syncRegion(t, "shared")
	if ref := metav1.GetControllerOf(tc.class(t, "shared")); ref == nil || ref.Kind != v1alpha1.AcceleratorFunctionKind {
		t.Errorf("controller = %+v, want the AcceleratorFunction", ref)
	}
	if c := condition(t, tc.getRegion(t, "shared").Status.Conditions, v1alpha1.ConditionReady); c.Reason != v1alpha1.ReasonDeviceClassConflict {
		t.Errorf("FpgaRegion Ready = %+v", c)
	}
	// The region's sync must not have deleted the function's class.
	tc.syncAF(t, "shared")
	if c := condition(t, tc.getAF(t, "shared").Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("AcceleratorFunction Ready = %+v", c)
	}
}
