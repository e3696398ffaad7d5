package autoscale

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
)

// TestScaleFromZero runs the cases in order on a cluster that starts with
// no node at all: a claim no instance type can satisfy launches nothing; a
// pending claim launches exactly one node of the one FPGA instance type
// that can satisfy it, whose driver publishes a slice the scheduler
// allocates from; a second pod that fits that node launches nothing; and
// once the pods are gone, consolidation removes the node and its slices go
// with it.
func TestScaleFromZero(t *testing.T) {
	requireEnvironment(t)
	ns := namespace(t, "autoscale")
	claimTemplate(t, ns, "one-fpga", 1)
	claimTemplate(t, ns, "three-fpgas", 3)

	if !t.Run("a claim no instance type can satisfy launches nothing", func(t *testing.T) {
		ctx := context.Background()
		createPod(t, ns, "unsatisfiable", "three-fpgas")
		var event string
		err := env.c.WaitFor(ctx, env.karpenter, 2*time.Minute, func() error {
			event = karpenterEvent(ctx, ns, "unsatisfiable")
			if event == "" {
				return fmt.Errorf("no FailedScheduling event from Karpenter yet; events: %s", env.c.Events(ctx, ns, "unsatisfiable"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Karpenter says: %s", event)
		if claims := nodeClaims(t); len(claims) != 0 {
			t.Errorf("Karpenter launched %v for a claim no instance type can satisfy", claims)
		}
		deletePods(t, ns, "unsatisfiable")
	}) {
		return
	}

	var node string
	if !t.Run("a pending claim launches exactly one FPGA node", func(t *testing.T) {
		node = scaleUp(t, ns)
	}) {
		return
	}

	if !t.Run("a second pod that fits the node launches nothing", func(t *testing.T) {
		ctx := context.Background()
		createPod(t, ns, "second", "one-fpga")
		pod := waitBound(t, ns, "second")
		if pod.Spec.NodeName != node {
			t.Errorf("the second pod was bound to %s, want %s (the node the first launched)", pod.Spec.NodeName, node)
		}
		if claims := nodeClaims(t); len(claims) != 1 {
			t.Errorf("%d NodeClaims (%v) after the second pod, want the first one only", len(claims), claims)
		}
		first, second := allocatedDevice(ctx, t, ns, "first"), allocatedDevice(ctx, t, ns, "second")
		if first == second {
			t.Errorf("both pods were allocated device %s", first)
		}
	}) {
		return
	}

	t.Run("consolidation removes the empty node and its slices", func(t *testing.T) {
		ctx := context.Background()
		begin := time.Now()
		deletePods(t, ns, "first", "second")
		if err := env.c.WaitFor(ctx, env.karpenter, 5*time.Minute, func() error {
			if claims := nodeClaims(t); len(claims) != 0 {
				return fmt.Errorf("NodeClaims %v remain", claims)
			}
			if _, err := env.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("node %s remains (%v)", node, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		removed := time.Since(begin)
		if err := env.c.WaitFor(ctx, nil, 2*time.Minute, func() error {
			if slices := nodeSlices(ctx, t, node); len(slices) != 0 {
				return fmt.Errorf("%d ResourceSlices of node %s remain", len(slices), node)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if p := env.agents.driver(node); p != nil {
			t.Errorf("the driver of the removed node %s still runs", node)
		}
		t.Logf("timings: pods deleted -> node removed %s -> its slices gone %s",
			removed.Round(100*time.Millisecond), time.Since(begin).Round(100*time.Millisecond))
	})
}

// scaleUp creates a pod whose claim asks for one region of regionClass on a
// cluster without FPGA nodes and follows it until it is bound, recording
// when each step first became visible. It returns the launched node.
func scaleUp(t *testing.T, ns string) string {
	ctx := context.Background()
	begin := time.Now()
	createPod(t, ns, "first", "one-fpga")
	var pending, claimed, launched, published, bound time.Duration
	var node string
	err := env.c.WaitFor(ctx, env.karpenter, 4*time.Minute, func() error {
		if err := env.agents.failed(); err != nil {
			t.Fatal(err)
		}
		now := time.Since(begin)
		pod, err := env.c.Client.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pending == 0 && unschedulable(pod) {
			pending = now
		}
		if claimed == 0 && len(nodeClaims(t)) > 0 {
			claimed = now
		}
		if node == "" {
			if nodes, err := env.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil && len(nodes.Items) > 0 {
				node, launched = nodes.Items[0].Name, now
			}
		}
		if node != "" && published == 0 && len(nodeSlices(ctx, t, node)) > 0 {
			published = now
		}
		if pod.Spec.NodeName == "" {
			return fmt.Errorf("pod not bound; events: %s", env.c.Events(ctx, ns, "first"))
		}
		bound = now
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler's verdict before Karpenter acted: no node at all.
	if msg := schedulerEvents(ctx, ns, "first"); !strings.Contains(msg, "no nodes available") {
		t.Errorf("the scheduler's events about the pod (%q) do not say that no node was available", msg)
	}

	claims := nodeClaims(t)
	if len(claims) != 1 {
		t.Fatalf("NodeClaims %v, want exactly one", claims)
	}
	// Karpenter initializes the node only once the drivers it allocated
	// template devices of have published their pools there.
	nc, err := env.dyn.Resource(nodeClaimsResource).Get(ctx, claims[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if drivers := nc.GetAnnotations()["karpenter.sh/requested-dra-drivers"]; drivers != driverName {
		t.Errorf("NodeClaim %s requests DRA drivers %q, want %q", claims[0], drivers, driverName)
	}
	n, err := env.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if it := n.Labels[corev1.LabelInstanceTypeStable]; it != fpgaInstanceType {
		t.Errorf("Karpenter launched a %s node, want %s (the only instance type whose devices the claim's class selects)", it, fpgaInstanceType)
	}
	pod, err := env.c.Client.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != node {
		t.Errorf("pod bound to %s, want the launched node %s", pod.Spec.NodeName, node)
	}
	allocatedDevice(ctx, t, ns, "first")
	compareWithTemplate(ctx, t, node)

	started, _ := env.agents.startedAt(node)
	t.Logf("timings: pod created -> unschedulable %s -> NodeClaim %s -> node %s -> driver started %s -> slice published %s -> pod bound %s",
		pending.Round(100*time.Millisecond), claimed.Round(100*time.Millisecond), launched.Round(100*time.Millisecond),
		started.Sub(begin).Round(100*time.Millisecond), published.Round(100*time.Millisecond), bound.Round(100*time.Millisecond))
	return node
}

// compareWithTemplate checks the promise Karpenter relied on: the slice the
// driver published on node holds every device of the instance type's
// template, in the same order, with every template attribute at the same
// value.
func compareWithTemplate(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	tmpl, err := slicetemplate.ForShape(env.shapes[fpgaInstanceType], slicetemplate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	slices := nodeSlices(ctx, t, node)
	if len(slices) != 1 {
		t.Fatalf("node %s has %d slices of %s, want 1", node, len(slices), driverName)
	}
	published := slices[0].Spec.Devices
	if len(published) != len(tmpl.Devices) {
		t.Fatalf("the node publishes %d devices, the template has %d", len(published), len(tmpl.Devices))
	}
	for i, d := range tmpl.Devices {
		if published[i].Name != d.Name {
			t.Errorf("device %d: published %s, template %s", i, published[i].Name, d.Name)
			continue
		}
		for name, a := range d.Attributes {
			if got, ok := published[i].Attributes[name]; !ok || !apiequality.Semantic.DeepEqual(got, a) {
				t.Errorf("device %s: %s published as %v (present %v), template %v", d.Name, name, got, ok, a)
			}
		}
	}
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// schedulerEvents returns the messages of the scheduler's FailedScheduling
// events about a pod.
func schedulerEvents(ctx context.Context, ns, pod string) string {
	list, err := env.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == "FailedScheduling" && (e.Source.Component == "default-scheduler" || e.ReportingController == "default-scheduler") {
			out = append(out, e.Message)
		}
	}
	return strings.Join(out, " | ")
}

// karpenterEvent returns the message of Karpenter's FailedScheduling event
// about a pod ("" when there is none).
func karpenterEvent(ctx context.Context, ns, pod string) string {
	list, err := env.c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return ""
	}
	for _, e := range list.Items {
		if e.Reason == "FailedScheduling" && (e.Source.Component == "karpenter" || e.ReportingController == "karpenter") {
			return e.Message
		}
	}
	return ""
}

// nodeClaims returns the names of Karpenter's NodeClaims.
func nodeClaims(t *testing.T) []string {
	t.Helper()
	list, err := env.dyn.Resource(nodeClaimsResource).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, nc := range list.Items {
		names = append(names, nc.GetName())
	}
	return names
}

// nodeSlices returns the driver's ResourceSlices of node.
func nodeSlices(ctx context.Context, t *testing.T, node string) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := env.c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Driver == driverName {
			out = append(out, s)
		}
	}
	return out
}

// allocatedDevice returns the device the scheduler allocated to the pod's
// claim, after checking that it is the driver's, in the pool of the pod's
// node.
func allocatedDevice(ctx context.Context, t *testing.T, ns, podName string) string {
	t.Helper()
	pod, err := env.c.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s has claim statuses %v, want one generated claim", podName, pod.Status.ResourceClaimStatuses)
	}
	claim, err := env.c.Client.ResourceV1().ResourceClaims(ns).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s allocation %+v, want one device", claim.Name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.Driver != driverName || r.Pool != pod.Spec.NodeName {
		t.Errorf("claim %s: device %s/%s/%s, want one of %s in pool %s", claim.Name, r.Driver, r.Pool, r.Device, driverName, pod.Spec.NodeName)
	}
	return r.Device
}

func waitBound(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pod *corev1.Pod
	if err := env.c.WaitFor(ctx, env.karpenter, 2*time.Minute, func() error {
		var err error
		if pod, err = env.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if pod.Spec.NodeName == "" {
			return fmt.Errorf("pod %s not bound; events: %s", name, env.c.Events(ctx, ns, name))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return pod
}

// namespace creates a namespace with its default service account (the
// controller manager's would come a few seconds later) and deletes it at
// the end of the test.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := env.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.c.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func claimTemplate(t *testing.T, ns, name string, count int64) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: regionClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
	if _, err := env.c.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createPod creates a pod that asks for one CPU and the claim of template.
// Its image is never pulled: kwok plays the kubelet.
func createPod(t *testing.T, ns, name, template string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			AutomountServiceAccountToken:  ptr.To(false),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "fpga", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{
				Name: "work", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Claims:   []corev1.ResourceClaim{{Name: "fpga"}},
				},
			}},
		},
	}
	if _, err := env.c.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// deletePods deletes pods and waits until they are gone (kwok finishes the
// deletion of a pod on its nodes).
func deletePods(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		if err := env.c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.c.WaitFor(ctx, nil, time.Minute, func() error {
		var left []string
		for _, name := range names {
			if _, err := env.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, name)
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("pods %s not gone", strings.Join(left, ", "))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
