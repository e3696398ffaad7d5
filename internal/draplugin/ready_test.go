package draplugin_test

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// heldStatus is an API client whose claim status updates each wait until
// the test lets them through (or the test ends).
type heldStatus struct {
	kubernetes.Interface
	updates chan heldUpdate
	ended   <-chan struct{}
}

type heldUpdate struct {
	claim   *resourceapi.ResourceClaim
	release chan struct{}
}

func (h *heldStatus) ResourceV1() resourcev1.ResourceV1Interface {
	return heldResourceV1{h.Interface.ResourceV1(), h}
}

type heldResourceV1 struct {
	resourcev1.ResourceV1Interface
	h *heldStatus
}

func (r heldResourceV1) ResourceClaims(namespace string) resourcev1.ResourceClaimInterface {
	return heldClaims{r.ResourceV1Interface.ResourceClaims(namespace), r.h}
}

type heldClaims struct {
	resourcev1.ResourceClaimInterface
	h *heldStatus
}

func (c heldClaims) UpdateStatus(ctx context.Context, claim *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error) {
	u := heldUpdate{claim: claim, release: make(chan struct{})}
	select {
	case c.h.updates <- u:
		select {
		case <-u.release:
		case <-c.h.ended:
		}
	case <-c.h.ended:
	}
	return c.ResourceClaimInterface.UpdateStatus(ctx, claim, opts)
}

// TestPrepareAnswersBeforeStatusWrite: the kubelet has its answer while
// the API server has not yet taken the claim's status; the status is
// written Ready after.
func TestPrepareAnswersBeforeStatusWrite(t *testing.T) {
	ended := make(chan struct{})
	t.Cleanup(func() { close(ended) })
	held := &heldStatus{updates: make(chan heldUpdate), ended: ended}
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName}
	pn := &preparingNode{testNode: startNode(t, nodeOptions{sim: simnode.Options{Cards: 1}, claims: claims, configure: func(c *draplugin.Config) {
		held.Interface = c.KubeClient
		claims.Client = held
	}})}
	c := pn.claim(t, []string{dev0})

	type answer struct {
		r   *drapbv1.NodePrepareResourcesResponse
		err error
	}
	answered := make(chan answer, 1)
	dra := pn.draClient(t)
	go func() {
		r, err := dra.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
		answered <- answer{r, err}
	}()
	var update heldUpdate
	select {
	case update = <-held.updates:
	case <-time.After(20 * time.Second):
		t.Fatal("the claim's status was never written")
	}
	if update.claim.UID != c.UID {
		t.Fatalf("status update of claim %s, want %s", update.claim.UID, c.UID)
	}
	select {
	case a := <-answered:
		if a.err != nil || a.r.Claims[string(c.UID)].GetError() != "" || len(a.r.Claims[string(c.UID)].GetDevices()) != 1 {
			t.Fatalf("prepare: %+v, %v", a.r, a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the prepare waits for the claim's status write")
	}
	if got := pn.currentClaim(t, c); readyIn(got, dev0) {
		t.Fatalf("Ready before the status write was let through: %+v", got.Status.Devices)
	}
	close(update.release)
	pn.waitClaim(t, c, func(c *resourceapi.ResourceClaim) bool { return readyIn(c, dev0) })
}

// readyIn reports whether device is Ready in the claim's status.
func readyIn(c *resourceapi.ResourceClaim, device string) bool {
	cond := condition(c, device, draplugin.ConditionReady)
	return cond != nil && cond.Status == metav1.ConditionTrue
}

// currentClaim reads the claim from the fake's tracker (not among the
// driver's recorded actions).
func (n *testNode) currentClaim(t testing.TB, c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	t.Helper()
	obj, err := n.client.Tracker().Get(claimsResource, c.Namespace, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*resourceapi.ResourceClaim)
}

// waitClaim watches the API server until the claim satisfies ok, and
// returns it. It reads through the fake's tracker, so that its reads are
// not among the driver's recorded actions.
func (n *testNode) waitClaim(t testing.TB, c *resourceapi.ResourceClaim, ok func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	t.Helper()
	w, err := n.client.Tracker().Watch(claimsResource, c.Namespace, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(20 * time.Second)
	for {
		cur := n.currentClaim(t, c)
		if ok(cur) {
			return cur
		}
		select {
		case ev, open := <-w.ResultChan():
			if !open || ev.Type == watch.Error {
				t.Fatalf("claim watch ended: %v", ev)
			}
		case <-timeout:
			t.Fatalf("claim %s never reached the expected state; last status: %+v", c.Name, cur.Status.Devices)
		}
	}
}
