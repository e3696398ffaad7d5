package deviceplugin_test

import (
	"context"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestBothReissuedIDsInOneContainer: containers c0 ("dfl-port.0", card
// 0's port) and c1 ("dfl-port.1", card 1's) ran; the cards were
// enumerated anew the other way round; both containers ended and the
// kubelet hands both IDs to one new container. Both holds are stale
// (their IDs were handed out again) and go, also those on the ports the
// request names: the Allocate succeeds.
func TestBothReissuedIDsInOneContainer(t *testing.T) {
	const p0, p1 = "fpga-0000-01-00-0-p0", "fpga-0000-02-00-0-p0"
	res := intelDomain + "/" + fixtureAF0
	h0 := state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: res}
	h1 := state.Holder{UID: "deviceplugin-af-" + p1, Namespace: deviceplugin.LegacyNamespace, Name: res}
	n := startNode(t, nodeOptions{
		sim:  simnode.Options{Cards: 2, PortsPerCard: 1, AFUIDs: []string{simnode.DefaultAFUID}},
		mode: deviceplugin.ModeAF, cdi: true,
		before: func(st *state.State, r *discovery.Result, sim *simnode.Node) {
			for _, x := range []struct {
				h       state.Holder
				dev, id string
			}{{h0, p0, "dfl-port.0"}, {h1, p1, "dfl-port.1"}} {
				if _, err := st.Prepare(context.Background(), x.h, []state.DeviceRequest{{Device: x.dev, Requests: []string{x.id}}}, r); err != nil {
					t.Fatal(err)
				}
			}
			if err := simnode.SwapPorts(sim.Root, sim.Cards[0].Ports[0].SysfsPath, sim.Cards[1].Ports[0].SysfsPath); err != nil {
				t.Fatal(err)
			}
		},
	})
	regs := n.kubelet.waitRegistrations(t, 1)
	if _, err := allocate(t, n.client(t, regs[res]), "dfl-port.0", "dfl-port.1"); err != nil {
		t.Fatalf("Allocate of both re-issued IDs: %v (holders %v)", err, n.state.Holders())
	}
}
