package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// getAF reads an AcceleratorFunction from the fake API server.
func (tc *testController) getAF(t *testing.T, name string) *v1alpha1.AcceleratorFunction {
	t.Helper()
	u, err := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource).Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get AcceleratorFunction %s: %v", name, err)
	}
	af := &v1alpha1.AcceleratorFunction{}
	if err := fromUnstructured(u, af); err != nil {
		t.Fatal(err)
	}
	return af
}

// putAF creates or replaces an AcceleratorFunction in the fake API server.
func (tc *testController) putAF(t *testing.T, af *v1alpha1.AcceleratorFunction) {
	t.Helper()
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(af)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: content}
	client := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource)
	if _, err := client.Update(tc.ctx, u, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = client.Create(tc.ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create AcceleratorFunction: %v", err)
		}
	} else if err != nil {
		t.Fatalf("update AcceleratorFunction: %v", err)
	}
}

// classNames lists the DeviceClasses in the fake API server, those for
// which every filter is true.
func (tc *testController) classNames(t *testing.T, filters ...func(*resourceapi.DeviceClass) bool) []string {
	t.Helper()
	list, err := tc.kube.ResourceV1().DeviceClasses().List(tc.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range list.Items {
		if !slices.ContainsFunc(filters, func(f func(*resourceapi.DeviceClass) bool) bool { return !f(&list.Items[i]) }) {
			names = append(names, list.Items[i].Name)
		}
	}
	return names
}

func (tc *testController) class(t *testing.T, name string) *resourceapi.DeviceClass {
	t.Helper()
	c, err := tc.kube.ResourceV1().DeviceClasses().Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get DeviceClass %s: %v", name, err)
	}
	return c
}

// syncAF settles the caches, then reconciles one AcceleratorFunction.
func (tc *testController) syncAF(t *testing.T, name string) {
	t.Helper()
	tc.settle(t)
	if err := tc.sync(tc.ctx, key{kind: v1alpha1.AcceleratorFunctionKind, name: name}); err != nil {
		t.Fatalf("sync AcceleratorFunction %s: %v", name, err)
	}
}

// classConfig decodes the FpgaConfig a DeviceClass carries.
func classConfig(t *testing.T, c *resourceapi.DeviceClass) *v1alpha1.FpgaConfig {
	t.Helper()
	if len(c.Spec.Config) != 1 || c.Spec.Config[0].Opaque == nil || c.Spec.Config[0].Opaque.Driver != testDriver {
		t.Fatalf("DeviceClass %s config = %+v, want one opaque config for %s", c.Name, c.Spec.Config, testDriver)
	}
	cfg, err := v1alpha1.DecodeAndValidate(c.Spec.Config[0].Opaque.Parameters.Raw)
	if err != nil {
		t.Fatalf("DeviceClass %s carries an FpgaConfig the node would reject: %v", c.Name, err)
	}
	return cfg
}

func condition(t *testing.T, conds []metav1.Condition, condType string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, condType)
	if c == nil {
		t.Fatalf("no %s condition in %+v", condType, conds)
	}
	return *c
}

// TestAcceleratorFunctionLifecycle creates, counts, updates and deletes an
// AcceleratorFunction and checks the DeviceClasses and status each time.
func TestAcceleratorFunctionLifecycle(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	tc := newTestController(t, nil)
	tc.startInformers(t)

	// Create, region mode: two classes, no devices yet.
	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{
		AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion,
		Bitstream: testIfID + "/" + testAFUID + ".gbs", SHA256: testSHA256,
	})
	tc.putAF(t, af)
	tc.syncAF(t, "nlb0")
	if diff := cmp.Diff([]string{"nlb0", "nlb0-program"}, tc.classNames(t)); diff != "" {
		t.Fatalf("DeviceClasses (-want +got):\n%s", diff)
	}
	checkPinnedRegionClasses(t, tc, af)

	// A node publishes its devices: the counts follow.
	for _, s := range publishedSlices(t, n, res, testNode, true) {
		if _, err := tc.kube.ResourceV1().ResourceSlices().Create(tc.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.syncAF(t, "nlb0")
	got := tc.getAF(t, "nlb0")
	wantLoaded, wantProgrammable := int32(len(portsWith(res, testAFUID))), int32(len(portsWith(res, "")))
	if wantLoaded == 0 || wantLoaded == wantProgrammable {
		t.Fatalf("fixture: %d of %d ports hold the AFU, want some but not all", wantLoaded, wantProgrammable)
	}
	if got.Status.LoadedDevices != wantLoaded || got.Status.ProgrammableDevices != wantProgrammable {
		t.Errorf("counts = %d loaded, %d programmable, want %d, %d", got.Status.LoadedDevices, got.Status.ProgrammableDevices, wantLoaded, wantProgrammable)
	}
	if c := condition(t, got.Status.Conditions, v1alpha1.ConditionDevicesAvailable); c.Status != metav1.ConditionTrue {
		t.Errorf("DevicesAvailable = %+v", c)
	}

	// Update to af mode with another AFU: the program class goes, the
	// remaining class follows the spec.
	af = tc.getAF(t, "nlb0")
	af.Generation = 2
	af.Spec = v1alpha1.AcceleratorFunctionSpec{AFUID: testSecondID, Mode: v1alpha1.ModeAF}
	tc.putAF(t, af)
	tc.syncAF(t, "nlb0")
	if diff := cmp.Diff([]string{"nlb0"}, tc.classNames(t)); diff != "" {
		t.Fatalf("DeviceClasses after the update (-want +got):\n%s", diff)
	}
	if got, want := tc.class(t, "nlb0").Spec.Selectors[0].CEL.Expression, LoadedSelector(testDriver, testSecondID, ""); got != want {
		t.Errorf("nlb0 selector after the update = %s, want %s", got, want)
	}
	if cfg := classConfig(t, tc.class(t, "nlb0")); cfg.AFUID != testSecondID || cfg.InterfaceID != "" || cfg.Programming != v1alpha1.ProgrammingNever {
		t.Errorf("nlb0 config after the update = %+v", cfg)
	}
	got = tc.getAF(t, "nlb0")
	if got.Status.ObservedGeneration != 2 || got.Status.LoadedDevices != int32(len(portsWith(res, testSecondID))) ||
		got.Status.ProgrammableDevices != 0 || !cmp.Equal(got.Status.DeviceClasses, []string{"nlb0"}) {
		t.Errorf("status after the update = %+v", got.Status)
	}

	// A sync without a change writes nothing.
	before := tc.writes()
	tc.syncAF(t, "nlb0")
	if after := tc.writes(); len(after) != len(before) {
		t.Errorf("an idempotent sync wrote: %v", after[len(before):])
	}

	// Delete: the classes go (the garbage collector's job in a cluster,
	// done by the controller too).
	if err := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource).Delete(tc.ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.syncAF(t, "nlb0")
	if names := tc.classNames(t); len(names) != 0 {
		t.Errorf("DeviceClasses after the delete = %v, want none", names)
	}
}

// checkPinnedRegionClasses checks the DeviceClasses and the status of af,
// the AcceleratorFunction nlb0 pinned in region mode, before any node
// publishes devices: both classes owned by af and carrying its pin, Ready,
// and no devices available.
func checkPinnedRegionClasses(t *testing.T, tc *testController, af *v1alpha1.AcceleratorFunction) {
	t.Helper()
	for _, name := range []string{"nlb0", "nlb0-program"} {
		c := tc.class(t, name)
		ref := metav1.GetControllerOfNoCopy(c)
		if ref == nil || ref.Kind != v1alpha1.AcceleratorFunctionKind || ref.Name != "nlb0" || ref.UID != af.UID ||
			ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("DeviceClass %s controller = %+v, want AcceleratorFunction nlb0 blocking deletion", name, ref)
		}
		if c.Labels[ManagedByLabel] != ManagedByValue {
			t.Errorf("DeviceClass %s labels = %v", name, c.Labels)
		}
		// A pinned function's classes carry the pin (see
		// AcceleratorFunctionClasses).
		if diff := cmp.Diff(&v1alpha1.FpgaConfig{TypeMeta: fpgaConfigType, AFUID: testAFUID, InterfaceID: testIfID,
			Bitstream: testIfID + "/" + testAFUID + ".gbs", SHA256: testSHA256, Programming: v1alpha1.ProgrammingIfNeeded},
			classConfig(t, c)); diff != "" {
			t.Errorf("%s config (-want +got):\n%s", name, diff)
		}
	}
	if got, want := tc.class(t, "nlb0").Spec.Selectors[0].CEL.Expression, PinnedLoadedSelector(testDriver, testAFUID, testIfID); got != want {
		t.Errorf("nlb0 selector = %s, want %s", got, want)
	}
	got := tc.getAF(t, "nlb0")
	if got.Status.ObservedGeneration != 1 || got.Status.LoadedDevices != 0 || got.Status.ProgrammableDevices != 0 ||
		!cmp.Equal(got.Status.DeviceClasses, []string{"nlb0", "nlb0-program"}) {
		t.Errorf("status = %+v", got.Status)
	}
	if c := condition(t, got.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonDeviceClassesReady {
		t.Errorf("Ready = %+v", c)
	}
	if c := condition(t, got.Status.Conditions, v1alpha1.ConditionDevicesAvailable); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoDevices {
		t.Errorf("DevicesAvailable = %+v", c)
	}
}

var fpgaConfigType = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.FpgaConfigKind}

// TestAcceleratorFunctionTaintedDevicesNotCounted checks that unhealthy
// (tainted) devices are left out of the counts.
func TestAcceleratorFunctionTaintedDevicesNotCounted(t *testing.T) {
	n, _ := simulatedNode(t, simnode.Options{Cards: 2, AFUIDs: []string{testAFUID}})
	if err := n.SetPortErrors(n.Cards[1].Ports[0], "0x1"); err != nil {
		t.Fatal(err)
	}
	_, res := rescan(t, n)
	var objs []runtime.Object
	for _, s := range publishedSlices(t, n, res, testNode, true) {
		objs = append(objs, s)
	}
	tc := newTestController(t, objs, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{
		AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion}))
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if got := tc.getAF(t, "nlb0").Status; got.LoadedDevices != 1 || got.ProgrammableDevices != 1 {
		t.Errorf("counts = %d loaded, %d programmable, want 1, 1 (the other card is tainted)", got.LoadedDevices, got.ProgrammableDevices)
	}
}

// TestAcceleratorFunctionCountsNewestPoolGeneration checks that slices of
// an older pool generation (being replaced) are not counted twice.
func TestAcceleratorFunctionCountsNewestPoolGeneration(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 1, AFUIDs: []string{testAFUID}})
	old := publishedSlices(t, n, res, testNode, true)[0]
	newer := old.DeepCopy()
	newer.Name, newer.Spec.Pool.Generation = "newer", old.Spec.Pool.Generation+1
	other := old.DeepCopy()
	other.Name, other.Spec.Driver = "other-driver", "gpu.example.com"
	tc := newTestController(t, []runtime.Object{old, newer, other}, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID}))
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if got := tc.getAF(t, "nlb0").Status.LoadedDevices; got != 1 {
		t.Errorf("LoadedDevices = %d, want 1", got)
	}
}

// TestAcceleratorFunctionConflict checks that a DeviceClass of the wanted
// name that belongs to something else is left alone and reported, and that
// the function takes the name once the class is gone.
func TestAcceleratorFunctionConflict(t *testing.T) {
	foreign := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nlb0"},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}},
	}
	tc := newTestController(t, []runtime.Object{foreign}, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID}))
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if got := tc.class(t, "nlb0"); got.Spec.Selectors[0].CEL.Expression != "true" || len(got.OwnerReferences) != 0 {
		t.Errorf("the foreign DeviceClass was changed: %+v", got)
	}
	c := condition(t, tc.getAF(t, "nlb0").Status.Conditions, v1alpha1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonDeviceClassConflict ||
		!strings.Contains(c.Message, "DeviceClass nlb0 exists and is not controlled by this AcceleratorFunction") {
		t.Errorf("Ready = %+v", c)
	}

	if err := tc.kube.ResourceV1().DeviceClasses().Delete(tc.ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.syncAF(t, "nlb0")
	if ref := metav1.GetControllerOf(tc.class(t, "nlb0")); ref == nil || ref.Name != "nlb0" {
		t.Errorf("DeviceClass nlb0 controller = %v after the foreign class went", ref)
	}
	if c := condition(t, tc.getAF(t, "nlb0").Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v", c)
	}
}

// TestAcceleratorFunctionInvalid checks that an object that slipped past
// validation gets no class and says why.
func TestAcceleratorFunctionInvalid(t *testing.T) {
	tc := newTestController(t, nil, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, Mode: v1alpha1.ModeRegion}))
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if names := tc.classNames(t); len(names) != 0 {
		t.Errorf("DeviceClasses = %v, want none", names)
	}
	c := condition(t, tc.getAF(t, "nlb0").Status.Conditions, v1alpha1.ConditionReady)
	if c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.interfaceID: Required value") {
		t.Errorf("Ready = %+v", c)
	}
}

// TestAcceleratorFunctionAdoptsAfterRecreate checks that a class left by a
// deleted and re-created function of the same name is taken over.
func TestAcceleratorFunctionAdoptsAfterRecreate(t *testing.T) {
	old := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID})
	classes, err := AcceleratorFunctionClasses(old, testDriver, "")
	if err != nil {
		t.Fatal(err)
	}
	recreated := old.DeepCopy()
	recreated.UID = "uid-recreated"
	tc := newTestController(t, []runtime.Object{classes[0]}, recreated)
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if ref := metav1.GetControllerOf(tc.class(t, "nlb0")); ref == nil || ref.UID != "uid-recreated" {
		t.Errorf("DeviceClass nlb0 controller = %+v, want the re-created function", ref)
	}
}
