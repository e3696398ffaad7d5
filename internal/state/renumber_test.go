package state_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// specNode is a device node of a CDI spec.
type specNode struct {
	Path  string `json:"path"`
	Major int64  `json:"major"`
	Minor int64  `json:"minor"`
}

// specNodes returns the device nodes of a holder's CDI spec.
func specNodes(t *testing.T, n *testnode.Node, uid string) []specNode {
	t.Helper()
	b, err := os.ReadFile(n.CDI.SpecPath(uid))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Devices []struct {
			ContainerEdits struct {
				DeviceNodes []specNode `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var out []specNode
	for _, d := range s.Devices {
		out = append(out, d.ContainerEdits.DeviceNodes...)
	}
	return out
}

// TestRenumberedPortGetsItsSpecRewritten: after the node's cards were
// enumerated anew (each port took the other's name and minor), a claim
// prepared again is answered with a CDI spec naming its port's node as it
// is now, not the node that now belongs to another claim's port.
func TestRenumberedPortGetsItsSpecRewritten(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	ctx := context.Background()
	devs := n.Devices(t)
	devX, devY := devs.Cards[0].Ports[0].DeviceName(), devs.Cards[1].Ports[0].DeviceName()
	if _, err := n.State.Prepare(ctx, holder("x"), request(devX, nil), devs); err != nil {
		t.Fatal(err)
	}
	if err := simnode.SwapPorts(n.Sim.Root, n.Sim.Cards[0].Ports[0].SysfsPath, n.Sim.Cards[1].Ports[0].SysfsPath); err != nil {
		t.Fatal(err)
	}
	devs = n.Devices(t)
	_, port, ok := devs.FindPort(devX)
	if !ok || int(port.Node.Minor) != n.Sim.Cards[1].Ports[0].Minor {
		t.Fatalf("after the swap, %s is %+v (found %v), want the minor %d", devX, port, ok, n.Sim.Cards[1].Ports[0].Minor)
	}
	if _, err := n.State.Prepare(ctx, holder("y"), request(devY, nil), devs); err != nil {
		t.Fatal(err)
	}
	// The kubelet prepares claim x again (a kubelet restart).
	if _, err := n.State.Prepare(ctx, holder("x"), request(devX, nil), devs); err != nil {
		t.Fatal(err)
	}
	x, y := specNodes(t, n, string(holder("x").UID)), specNodes(t, n, string(holder("y").UID))
	if len(x) != 1 || len(y) != 1 || x[0].Path != port.Node.Path || x[0].Minor != int64(port.Node.Minor) || x[0] == y[0] {
		t.Fatalf("claim x (device %s, now %s %d:%d) has nodes %+v, claim y (device %s) %+v", devX, port.Node.Path, port.Node.Major, port.Node.Minor, x, devY, y)
	}
}
