package controller

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

const (
	testDriver   = "fpga.dra.dev"
	testNode     = "worker-1"
	testAFUID    = simnode.DefaultAFUID
	testSecondID = simnode.SecondAFUID
	testIfID     = simnode.DefaultInterfaceID
	otherIfID    = "0123456789abcdef0123456789abcdef"
	testSHA256   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
)

// simulatedNode writes a simulated node with opts (internal/testnode) and
// discovers it.
func simulatedNode(t *testing.T, opts simnode.Options) (*simnode.Node, *discovery.Result) {
	t.Helper()
	n := testnode.New(t, testnode.Options{Sim: opts})
	return n.Sim, n.Devices(t)
}

// publishedSlices renders what the node daemon publishes for res on
// nodeName, as the scheduler sees it.
func publishedSlices(t *testing.T, n *simnode.Node, res *discovery.Result, nodeName string, programmable bool) []*resourceapi.ResourceSlice {
	t.Helper()
	devices := deviceslice.Devices(res, deviceslice.Options{DriverName: testDriver, Programmable: programmable, Root: n.Root})
	objs := deviceslice.SliceObjects(testDriver, nodeName, deviceslice.Resources(nodeName, devices))
	var out []*resourceapi.ResourceSlice
	for i := range objs {
		s := objs[i].DeepCopy()
		s.Name = s.GenerateName + "0"
		out = append(out, s)
	}
	return out
}

// portsWith returns the device names of the healthy ports where afuID is
// loaded (any when afuID is empty).
func portsWith(res *discovery.Result, afuID string) []string {
	var names []string
	for _, p := range res.Ports() {
		if p.Health.Healthy && (afuID == "" || p.AFUID == afuID) {
			names = append(names, p.DeviceName())
		}
	}
	return names
}

func acceleratorFunction(name string, spec v1alpha1.AcceleratorFunctionSpec) *v1alpha1.AcceleratorFunction {
	return &v1alpha1.AcceleratorFunction{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.AcceleratorFunctionKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-af-" + name), Generation: 1},
		Spec:       spec,
	}
}

func fpgaRegion(name, interfaceID string) *v1alpha1.FpgaRegion {
	return &v1alpha1.FpgaRegion{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.FpgaRegionKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-region-" + name), Generation: 1},
		Spec:       v1alpha1.FpgaRegionSpec{InterfaceID: interfaceID},
	}
}

// testController is a Controller on fake clients with started informers.
type testController struct {
	*Controller
	ctx  context.Context
	kube *kubefake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
}

func newTestController(t *testing.T, kubeObjs []runtime.Object, crs ...runtime.Object) *testController {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	// The fake stores custom resources as the API server serves them to a
	// dynamic client: unstructured, with no Go type in its scheme.
	var objs []runtime.Object
	for _, cr := range crs {
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cr)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: content})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.AcceleratorFunctionsResource: "AcceleratorFunctionList",
		v1alpha1.FpgaRegionsResource:          "FpgaRegionList",
	}, objs...)
	kube := kubefake.NewClientset(kubeObjs...)
	c, err := New(ctx, Config{DriverName: testDriver, KubeClient: kube, DynamicClient: dyn})
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	return &testController{Controller: c, ctx: ctx, kube: kube, dyn: dyn}
}

// startInformers starts the informers and waits for their caches.
func (tc *testController) startInformers(t *testing.T) {
	t.Helper()
	tc.start(tc.ctx)
	if !cache.WaitForCacheSync(tc.ctx.Done(), tc.synced...) {
		t.Fatal("informer caches did not sync")
	}
}

// eventually waits until cond holds, polling: informer caches follow the
// fake clients asynchronously. The timeout only bounds a failing test.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// settle waits until every informer cache holds exactly what the fake
// clients hold, so a sync sees the latest writes.
func (tc *testController) settle(t *testing.T) {
	t.Helper()
	eventually(t, "informer caches to catch up with the fake clients", func() bool {
		classes, err := tc.kube.ResourceV1().DeviceClasses().List(tc.ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		cachedClasses, _ := tc.classes.List(labelsEverything)
		if !sameObjects(classes.Items, cachedClasses) {
			return false
		}
		slices, err := tc.kube.ResourceV1().ResourceSlices().List(tc.ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		cachedSlices, _ := tc.slices.List(labelsEverything)
		if !sameObjects(slices.Items, cachedSlices) {
			return false
		}
		for _, r := range []struct {
			gvr    schema.GroupVersionResource
			lister cache.GenericLister
		}{{v1alpha1.AcceleratorFunctionsResource, tc.functions}, {v1alpha1.FpgaRegionsResource, tc.regions}} {
			list, err := tc.dyn.Resource(r.gvr).List(tc.ctx, metav1.ListOptions{})
			if err != nil {
				return false
			}
			cached, _ := r.lister.List(labelsEverything)
			if len(list.Items) != len(cached) {
				return false
			}
			byName := map[string]runtime.Object{}
			for _, o := range cached {
				byName[o.(metav1.Object).GetName()] = o
			}
			for i := range list.Items {
				if !equality.Semantic.DeepEqual(&list.Items[i], byName[list.Items[i].GetName()]) {
					return false
				}
			}
		}
		return true
	})
}

// sameObjects reports whether items and cached hold equal objects by name.
func sameObjects[T any, PT interface {
	*T
	metav1.Object
}](items []T, cached []PT) bool {
	if len(items) != len(cached) {
		return false
	}
	byName := map[string]PT{}
	for _, o := range cached {
		byName[o.GetName()] = o
	}
	for i := range items {
		item := PT(&items[i])
		if !equality.Semantic.DeepEqual(item, byName[item.GetName()]) {
			return false
		}
	}
	return true
}

// rescan discovers a simulated node again after a change.
func rescan(t *testing.T, n *simnode.Node) (*simnode.Node, *discovery.Result) {
	t.Helper()
	res, err := (&discovery.Scanner{Root: n.Root}).Scan()
	if err != nil {
		t.Fatalf("discover simulated node: %v", err)
	}
	return n, res
}

func (tc *testController) getUnstructured(t *testing.T, gvr schema.GroupVersionResource, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := tc.dyn.Resource(gvr).Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s %s: %v", gvr.Resource, name, err)
	}
	return u
}

// writes lists the writing API calls both fake clients received so far.
func (tc *testController) writes() []string {
	var out []string
	for _, a := range append(tc.kube.Actions(), tc.dyn.Actions()...) {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource())
	}
	return out
}
