package controller

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// TestOrphanedClassesSurviveAStaleCache: kubectl delete --cascade=orphan.
// The garbage collector removes the classes' owner references, then the
// orphan finalizer, and the function is gone. The controller hears of the
// function's deletion before its class informer has the collector's
// patches: its delete, conditional on the resource version it saw, keeps
// the classes the user asked to keep.
func TestOrphanedClassesSurviveAStaleCache(t *testing.T) {
	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion})
	tc := newTestController(t, nil, af)
	// The API server checks delete preconditions; the fake does not.
	tc.kube.PrependReactor("delete", "deviceclasses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		p := d.DeleteOptions.Preconditions
		cur, err := tc.kube.Tracker().Get(schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}, "", d.Name)
		if err != nil || p == nil {
			return false, nil, nil
		}
		c := cur.(*resourceapi.DeviceClass)
		if (p.UID != nil && *p.UID != c.UID) || (p.ResourceVersion != nil && *p.ResourceVersion != c.ResourceVersion) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "deviceclasses"}, d.Name, nil)
		}
		return false, nil, nil
	})
	tc.startInformers(t)
	tc.syncAF(t, "nlb0")
	names := tc.classNames(t)
	if len(names) != 2 {
		t.Fatalf("classes %v", names)
	}
	// The collector orphans the classes.
	var stale []*resourceapi.DeviceClass
	for _, n := range names {
		c := tc.class(t, n)
		stale = append(stale, c.DeepCopy())
		c.OwnerReferences = nil
		c.ResourceVersion = "99"
		if _, err := tc.kube.ResourceV1().DeviceClasses().Update(tc.ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.settle(t)
	// ... but the controller's class cache has not seen that yet.
	for _, c := range stale {
		if err := tc.classInformer.GetIndexer().Update(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource).Delete(tc.ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the function's deletion in the cache", func() bool {
		_, err := tc.functions.Get("nlb0")
		return apierrors.IsNotFound(err)
	})
	_ = tc.sync(tc.ctx, key{kind: v1alpha1.AcceleratorFunctionKind, name: "nlb0"})
	if got := tc.classNames(t); len(got) != 2 {
		t.Fatalf("orphaning delete of nlb0: the controller deleted the orphaned classes from its stale cache, left %v", got)
	}
}
