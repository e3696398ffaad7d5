package deviceplugin_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// renumberedNode is a node of two single-port cards whose port 0 was
// allocated as "dfl-port.0" for a container that still runs, and whose
// cards were then enumerated anew the other way round: card 0's port is
// "dfl-port.1" now, and "dfl-port.0" is card 1's. The cards carry afuIDs
// (simnode's default: both the default AFU). It returns the node and the
// running container's holder.
func renumberedNode(t *testing.T, afuIDs ...string) (*testNode, state.Holder) {
	if len(afuIDs) == 0 {
		afuIDs = []string{simnode.DefaultAFUID}
	}
	const p0 = "fpga-0000-01-00-0-p0"
	running := state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0}
	n := startNode(t, nodeOptions{
		sim:  simnode.Options{Cards: 2, PortsPerCard: 1, AFUIDs: afuIDs},
		mode: deviceplugin.ModeAF, cdi: true,
		before: func(st *state.State, res *discovery.Result, sim *simnode.Node) {
			if _, err := st.Prepare(context.Background(), running, []state.DeviceRequest{{Device: p0, Requests: []string{"dfl-port.0"}}}, res); err != nil {
				t.Fatal(err)
			}
			if err := simnode.SwapPorts(sim.Root, sim.Cards[0].Ports[0].SysfsPath, sim.Cards[1].Ports[0].SysfsPath); err != nil {
				t.Fatal(err)
			}
		},
	})
	if _, port, ok := n.plugin.Devices().FindPort(p0); !ok || port.Node.Name != "dfl-port.1" {
		t.Fatalf("after the swap, %s is %+v, want dfl-port.1", p0, port)
	}
	return n, running
}

// TestRenumberedPortNotAllocatedTwice: the kubelet, which knows only the
// IDs, takes "dfl-port.1" for free and allocates it to a new container:
// the endpoint refuses, since that is the port the running container got
// as "dfl-port.0".
func TestRenumberedPortNotAllocatedTwice(t *testing.T) {
	n, running := renumberedNode(t)
	regs := n.kubelet.waitRegistrations(t, 1)
	resp, err := allocate(t, n.client(t, regs[running.Name]), "dfl-port.1")
	if err == nil {
		t.Fatalf("Allocate of dfl-port.1, the port a running container got as dfl-port.0, succeeded: holders %v, devices %v", n.state.Holders(), resp.Devices)
	}
	if h := n.state.Holders()["fpga-0000-01-00-0-p0"]; h != running.UID {
		t.Fatalf("the port is held by %q, want the running container's %s", h, running.UID)
	}
}

// TestRenumberedHoldKept: with the node serving DRA, the kubelet lists the
// running container with "dfl-port.0", which discovery maps to card 1's
// port now: the hold of card 0's port, recorded as "dfl-port.0", is kept.
func TestRenumberedHoldKept(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n, running := renumberedNode(t)
	n.kubelet.waitRegistrations(t, 1)
	devs := n.plugin.Devices()
	n.plugin.Stop() // the node now serves DRA
	pr := &podResources{}
	pr.set(nil, pod("a", running.Name, "dfl-port.0"))
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client}
	if got := twoPasses(ctx, t, r, devs); len(got) > 0 {
		t.Fatalf("released %v while the kubelet lists a container with the port it was allocated as dfl-port.0 (now dfl-port.1)", got)
	}
}

// TestRenumberedNumberNotAllocatedUnderAnotherResource: a container got
// card 0's port as "dfl-port.0" (AFU 0); the cards were then enumerated
// anew, so that card 1's port, which carries AFU 1, is "dfl-port.0" now
// and has the device number the running container was given. The state
// knows (RenumberedDevices), but the kubelet tracks AFU 1's resource on
// its own and sees its "dfl-port.0" free: the endpoint must advertise it
// unhealthy and refuse it, or a second container shares the port with
// the first.
func TestRenumberedNumberNotAllocatedUnderAnotherResource(t *testing.T) {
	const p1 = "fpga-0000-02-00-0-p0"
	n, running := renumberedNode(t, simnode.DefaultAFUID, simnode.SecondAFUID)
	if _, port, ok := n.plugin.Devices().FindPort(p1); !ok || port.Node.Name != "dfl-port.0" {
		t.Fatalf("after the swap, %s is %+v, want dfl-port.0", p1, port)
	}
	if _, ok := n.state.RenumberedDevices(n.plugin.Devices())[p1]; !ok {
		t.Fatalf("the state does not know that %s has the running container's old number", p1)
	}
	c := n.client(t, n.kubelet.waitRegistrations(t, 2)[intelDomain+"/"+fixtureAF1])
	if got := watch(t, c)(); len(got) != 1 || got[0].ID != "dfl-port.0" || got[0].Health != pluginapi.Unhealthy {
		t.Errorf("AFU 1's list %v, want dfl-port.0 unhealthy: a running container reaches it by its old number", got)
	}
	resp, err := allocate(t, c, "dfl-port.0")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), string(running.UID)) {
		t.Errorf("Allocate of %s under AFU 1's resource: %v (devices %v), want FailedPrecondition naming %s", p1, err, resp.GetDevices(), running.UID)
	}
	if h, held := n.state.Holders()[p1]; held {
		t.Errorf("%s, which the running container reaches by its old number, is held by %s now", p1, h)
	}
}

// TestRenumberedHoldReleasedOnceItsContainerEnded: after the cards were
// enumerated anew, the resource a container's hold was made for no longer
// has the kubelet ID the container was given ("dfl-port.0" is another
// resource's now), so the kubelet never hands that ID out again and no
// Allocate releases the hold. While the endpoint serves, the stale-hold
// releaser must then release it once the kubelet lists no container with
// it; otherwise the port (advertised as "dfl-port.1", refused to every
// Allocate as re-enumerated) and the port that has the container's old
// number stay unusable for as long as the node runs.
func TestRenumberedHoldReleasedOnceItsContainerEnded(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	n, running := renumberedNode(t, simnode.DefaultAFUID, simnode.SecondAFUID)
	regs := n.kubelet.waitRegistrations(t, 2)
	pr := &podResources{}
	_, client := servePodResources(t, n.dir, pr)
	r := &deviceplugin.StaleReleaser{State: n.state, Pods: client, Only: n.plugin.Releasable}
	// While the container runs, the kubelet lists it with the ID it got.
	pr.set(nil, pod("a", running.Name, "dfl-port.0"))
	if got := twoPasses(ctx, t, r, n.plugin.Devices()); len(got) > 0 {
		t.Fatalf("released %v while the kubelet lists the container", got)
	}
	// The container ended.
	pr.set(nil)
	if got := twoPasses(ctx, t, r, n.plugin.Devices()); !slices.Equal(got, []types.UID{running.UID}) {
		t.Fatalf("released %v once no container has the port, want %s", got, running.UID)
	}
	if _, err := allocate(t, n.client(t, regs[running.Name]), "dfl-port.1"); err != nil {
		t.Errorf("Allocate of card 0's port (dfl-port.1) once the old hold is gone: %v", err)
	}
}
