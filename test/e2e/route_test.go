package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fpga-dra/fpga-dra-driver/internal/claimroute"
)

// Test15NodeWatchesOnlyItsOwnClaims: a node daemon's cost does not grow
// with the claims of other nodes. Its Binder watches ResourceClaims with
// claimroute.Selector (proven in the draplugin unit tests); here the real
// API server shows what that watch receives while claims routed to 200
// other nodes come and go: only the claims routed to this node, nothing
// of the others'.
func Test15NodeWatchesOnlyItsOwnClaims(t *testing.T) {
	requireCluster(t)
	// The labels of another driver name: the cluster's controller routes
	// (and unlabels) this driver's claims, which would race with the test.
	const routed = "route-test." + driverName
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := namespace(t, "e2e-route")
	claims := cluster.Client.ResourceV1().ResourceClaims(ns)
	w, err := claims.Watch(ctx, metav1.ListOptions{LabelSelector: claimroute.Selector(routed, cluster.NodeName).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	const others, own = 200, 3
	claim := func(name, node string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{claimroute.Label(routed): claimroute.Value(node)}},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "fpga.dra.dev"},
			}}}},
		}
	}
	// Other nodes' claims first and in between: any of them reaching the
	// watch would arrive before the own claims that follow it.
	for i := range others {
		if _, err := claims.Create(ctx, claim(fmt.Sprintf("other-%03d", i), fmt.Sprintf("worker-%03d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%(others/own) == others/own-1 {
			if _, err := claims.Create(ctx, claim(fmt.Sprintf("own-%d", i), cluster.NodeName), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	for len(got) < own {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended after %v", got)
			}
			c, isClaim := ev.Object.(*resourceapi.ResourceClaim)
			if !isClaim || ev.Type != watch.Added {
				t.Fatalf("unexpected watch event %s %T", ev.Type, ev.Object)
			}
			if c.Labels[claimroute.Label(routed)] != claimroute.Value(cluster.NodeName) {
				t.Fatalf("the node's watch received claim %s routed to %s", c.Name, c.Labels[claimroute.Label(routed)])
			}
			got = append(got, c.Name)
		case <-ctx.Done():
			t.Fatalf("received %v of %d own claims: %v", got, own, ctx.Err())
		}
	}
	// Another node's claim changes after the last own one: a bookmark-free
	// watch sees the next own change, never the other's.
	if err := claims.Delete(ctx, "other-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := claims.Delete(ctx, got[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		c, _ := ev.Object.(*resourceapi.ResourceClaim)
		if ev.Type != watch.Deleted || c == nil || c.Name != got[0] {
			t.Fatalf("after deleting another node's claim and then %s: got %s %v", got[0], ev.Type, c)
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	t.Logf("the node's watch received %d events for its %d claims and none for %d claims of %d other nodes", own+1, own, others, others)
}
