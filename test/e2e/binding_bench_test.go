package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// BenchmarkBindingLatency measures what binding conditions add to
// scheduling on the real cluster: per pod, from the moment its claim is
// seen allocated to the moment the pod is seen bound to the node, for a
// device that needs no programming (its AFU is loaded). It runs with
// binding conditions (the chart's default: the scheduler waits in PreBind
// until the driver reports the device programmed) and without
// (kubeletPlugin.bindingConditions=false), and reports p50 and p99 in
// milliseconds. Run it with
//
//	make e2e-bench
func BenchmarkBindingLatency(b *testing.B) {
	requireCluster(b)
	if !node.FromChart() {
		b.Skip("needs the driver installed from the chart (make images)")
	}
	ns := namespace(b, "e2e-bench-binding")
	deviceClass(b, "e2e-bench-default", fmt.Sprintf("%s.afuID == %q", attrs, simnode.DefaultAFUID))
	claimTemplate(b, ns, "default", "e2e-bench-default", opaque(b, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID})))
	b.Cleanup(func() { chartValues(b, "{}", true) })
	for _, mode := range []struct {
		name string
		on   bool
	}{{"with-binding-conditions", true}, {"without-binding-conditions", false}} {
		b.Run(mode.name, func(b *testing.B) {
			chartValues(b, fmt.Sprintf("kubeletPlugin: {bindingConditions: %v}\n", mode.on), mode.on)
			var lat []time.Duration
			for i := 0; b.Loop(); i++ {
				lat = append(lat, bindLatency(b, ns, fmt.Sprintf("%s-%d", mode.name[:4], i)))
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(float64(len(lat)), "pods")
		})
	}
}

// chartValues upgrades the chart release to values and waits until the
// node publishes with binding conditions on or off.
func chartValues(b testing.TB, values string, on bool) {
	b.Helper()
	wait, err := node.UpgradeChart(context.Background(), "", values)
	if err == nil {
		err = wait(context.Background())
	}
	if err != nil {
		b.Fatal(err)
	}
	waitBindingConditions(b, on)
}

// bindLatency runs one pod and returns the time from its claim's
// allocation to its binding, both as watches see them; it deletes the pod
// and waits until its claim is gone.
func bindLatency(b testing.TB, ns, name string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var allocated, bound time.Time
	done := make(chan struct{})
	claims, err := cluster.Client.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer claims.Stop()
	pods, err := cluster.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		b.Fatal(err)
	}
	defer pods.Stop()
	go func() {
		for ev := range claims.ResultChan() {
			if c, ok := ev.Object.(*resourceapi.ResourceClaim); ok && c.Status.Allocation != nil {
				mu.Lock()
				if allocated.IsZero() && isClaimOf(c, name) {
					allocated = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	go func() {
		defer close(done)
		for ev := range pods.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Spec.NodeName != "" {
				mu.Lock()
				bound = time.Now()
				mu.Unlock()
				return
			}
		}
	}()
	probePod(b, ns, name, "default")
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("pod %s not bound: %v; events: %s", name, ctx.Err(), cluster.Events(context.Background(), ns, name))
	}
	// The allocation is seen before the binding; wait for its event too.
	eventually(b, "allocation of "+name+" seen", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !allocated.IsZero()
	})
	if _, err := cluster.WaitPodRunning(ctx, ns, name, 90*time.Second); err != nil {
		b.Fatal(err)
	}
	deletePod(b, ns, name)
	mu.Lock()
	defer mu.Unlock()
	return bound.Sub(allocated)
}

// isClaimOf reports whether a generated claim belongs to the pod name.
func isClaimOf(c *resourceapi.ResourceClaim, pod string) bool {
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" && o.Name == pod {
			return true
		}
	}
	return false
}
