package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestPinnedStatusCountsWhatItsClassSelects: a pinned function on nodes
// with --programmable=false: its NAME class selects no port there, and
// the status counts no loaded device either.
func TestPinnedStatusCountsWhatItsClassSelects(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, AFUIDs: []string{testAFUID}})
	var objs []runtime.Object
	for _, s := range publishedSlices(t, n, res, testNode, false) {
		objs = append(objs, s)
	}
	tc := newTestController(t, objs, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{
		AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion, SHA256: testSHA256}))
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	st := tc.getAF(t, "nlb0").Status
	devices, err := tc.publishedDevices()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := tc.countMatching(tc.ctx, tc.class(t, "nlb0").Spec.Selectors[0].CEL.Expression, devices)
	if err != nil {
		t.Fatal(err)
	}
	if st.LoadedDevices != sel {
		t.Errorf("status: %d loaded devices, but class nlb0 selects %d (conditions %+v)", st.LoadedDevices, sel, st.Conditions)
	}
}

// TestOrphanDeletionKeepsClasses: kubectl delete --cascade=orphan: the
// garbage collector removes the owner references from the classes and
// keeps them; the controller, seeing the deletionTimestamp first, neither
// deletes nor creates them.
func TestOrphanDeletionKeepsClasses(t *testing.T) {
	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion})
	tc := newTestController(t, nil, af)
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	if len(tc.classNames(t)) != 2 {
		t.Fatalf("classes %v", tc.classNames(t))
	}
	got := tc.getAF(t, "nlb0")
	now := metav1.Now()
	got.DeletionTimestamp = &now
	got.Finalizers = []string{metav1.FinalizerOrphanDependents}
	tc.putAF(t, got)
	tc.syncAF(t, "nlb0")
	if names := tc.classNames(t); len(names) != 2 {
		t.Errorf("orphaning delete of nlb0: the controller deleted its classes, left %v", names)
	}
}
