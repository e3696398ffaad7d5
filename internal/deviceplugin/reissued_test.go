package deviceplugin_test

import (
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
)

// TestReissuedIDReleasesTheOldHold: after the renumbering, the container
// given "dfl-port.0" (card 0's port then) ends, and the kubelet hands
// "dfl-port.0" (card 1's port now) to a new container. The kubelet hands
// an ID out again only once its container ended, so the old hold of card
// 0's port, recorded as "dfl-port.0", goes: card 0's port, now
// "dfl-port.1", is allocatable while the new container runs.
func TestReissuedIDReleasesTheOldHold(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n, running := renumberedNode(t)
	regs := n.kubelet.waitRegistrations(t, 1)
	client := n.client(t, regs[running.Name])
	// The old container ended; the kubelet re-issues its ID to a new one.
	if _, err := allocate(t, client, "dfl-port.0"); err != nil {
		t.Fatalf("Allocate of dfl-port.0 (card 1's port now): %v", err)
	}
	pr := &podResources{}
	pr.set(nil, pod("new", running.Name, "dfl-port.0"))
	_, prc := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: prc}
	twoPasses(ctx, t, r, n.plugin.Devices())
	if _, err := allocate(t, client, "dfl-port.1"); err != nil {
		t.Fatalf("card 0's port (dfl-port.1), free since its container ended, refused while an unrelated container holds the re-issued ID dfl-port.0: %v", err)
	}
}
