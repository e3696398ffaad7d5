package deviceplugin_test

import (
	"context"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// renumberedNode is a node of two single-port cards whose port 0 was
// allocated as "dfl-port.0" for a container that still runs, and whose
// cards were then enumerated anew the other way round: card 0's port is
// "dfl-port.1" now, and "dfl-port.0" is card 1's. It returns the node and
// the running container's holder.
func renumberedNode(t *testing.T) (*testNode, state.Holder) {
	const p0 = "fpga-0000-01-00-0-p0"
	running := state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0}
	n := startNode(t, nodeOptions{
		sim:  simnode.Options{Cards: 2, PortsPerCard: 1, AFUIDs: []string{simnode.DefaultAFUID}},
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
