package deviceplugin_test

import (
	"cmp"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestModeSwitchHoldRefused: a container allocated in one mode may still
// run after the node's mode switched and the daemon restarted; the kubelet
// sees the new mode's resources as free (another resource name). Its ports
// are advertised unhealthy under the new mode's resource and an Allocate
// of them is refused, naming the holder, instead of superseding the hold.
// Once the old hold is released, the ports are allocated again.
func TestModeSwitchHoldRefused(t *testing.T) {
	const p0, p1 = "fpga-0000-01-00-0-p0", "fpga-0000-01-00-0-p1"
	for _, tc := range []struct {
		name string
		// old is the running container's holder, its ports and the device
		// IDs it had; mode, resource and device the new mode's.
		old      state.Holder
		oldPorts []string
		oldIDs   []string
		mode     deviceplugin.Mode
		resource string
		device   string
		// afuID is what the ports carry (DefaultAFUID when empty).
		afuID string
	}{
		{
			name:     "region to af",
			old:      state.Holder{UID: "deviceplugin-region-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureRegion},
			oldPorts: []string{p0, p1}, oldIDs: []string{"dfl-fme.0", "dfl-fme.0"},
			mode: deviceplugin.ModeAF, resource: intelDomain + "/" + fixtureAF0, device: "dfl-port.1",
		},
		{
			name:     "af to region",
			old:      state.Holder{UID: "deviceplugin-af-" + p1, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0},
			oldPorts: []string{p1}, oldIDs: []string{"dfl-port.1"},
			mode: deviceplugin.ModeRegion, resource: intelDomain + "/" + fixtureRegion, device: "dfl-fme.0",
		},
		{
			// The holder's UID names the port, not the AFU: the same
			// UID, for another resource.
			name:     "af to af of the AFU the port carries now",
			old:      state.Holder{UID: "deviceplugin-af-" + p0, Namespace: deviceplugin.LegacyNamespace, Name: intelDomain + "/" + fixtureAF0},
			oldPorts: []string{p0}, oldIDs: []string{"dfl-port.0"},
			mode: deviceplugin.ModeAF, resource: intelDomain + "/" + fixtureAF1, device: "dfl-port.0", afuID: simnode.SecondAFUID,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			afuID := cmp.Or(tc.afuID, simnode.DefaultAFUID)
			n := startNode(t, nodeOptions{
				sim:  simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{afuID, afuID}},
				mode: tc.mode, cdi: true,
				before: func(st *state.State, res *discovery.Result, _ *simnode.Node) {
					reqs := make([]state.DeviceRequest, len(tc.oldPorts))
					for i, p := range tc.oldPorts {
						reqs[i] = state.DeviceRequest{Device: p, Requests: []string{tc.oldIDs[i]}}
					}
					if _, err := st.Prepare(context.Background(), tc.old, reqs, res); err != nil {
						t.Fatal(err)
					}
				},
			})
			c := n.client(t, n.kubelet.waitRegistrations(t, 1)[tc.resource])
			for _, d := range watch(t, c)() {
				if held := tc.mode == deviceplugin.ModeRegion || d.ID == tc.device; held && d.Health != pluginapi.Unhealthy {
					t.Errorf("device %s, whose port the old mode's container holds, is advertised %s, want %s", d.ID, d.Health, pluginapi.Unhealthy)
				}
			}

			_, err := allocate(t, c, tc.device)
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), string(tc.old.UID)) || !strings.Contains(err.Error(), tc.old.Name) {
				t.Errorf("Allocate(%s) of a port the old mode's container holds: %v, want FailedPrecondition naming holder %s and resource %s", tc.device, err, tc.old.UID, tc.old.Name)
			}
			holders := n.state.Holders()
			for _, p := range tc.oldPorts {
				if holders[p] != tc.old.UID {
					t.Errorf("port %s held by %q after the refused Allocate, want the old container's %s", p, holders[p], tc.old.UID)
				}
			}

			// The old container ended and its hold was released.
			if err := n.state.Unprepare(context.Background(), tc.old.UID); err != nil {
				t.Fatal(err)
			}
			if _, err := allocate(t, c, tc.device); err != nil {
				t.Errorf("Allocate(%s) once the old hold is released: %v", tc.device, err)
			}
		})
	}
}

// TestRecoveredHolderAllocatesItsPort: a device-plugin hold rebuilt from
// its CDI spec after a damaged checkpoint names no resource; its own
// re-Allocate of its port (the same holder UID) is no mode switch and
// rebuilds the record.
func TestRecoveredHolderAllocatesItsPort(t *testing.T) {
	const p0 = "fpga-0000-01-00-0-p0"
	h := state.Holder{UID: "deviceplugin-af-" + p0} // as a record rebuilt from a spec
	n := startNode(t, nodeOptions{
		sim:  simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{simnode.DefaultAFUID, simnode.DefaultAFUID}},
		mode: deviceplugin.ModeAF, cdi: true,
		before: func(st *state.State, res *discovery.Result, _ *simnode.Node) {
			if _, err := st.Prepare(context.Background(), h, []state.DeviceRequest{{Device: p0, Requests: []string{"dfl-port.0"}}}, res); err != nil {
				t.Fatal(err)
			}
		},
	})
	c := n.client(t, n.kubelet.waitRegistrations(t, 1)[intelDomain+"/"+fixtureAF0])
	if _, err := allocate(t, c, "dfl-port.0"); err != nil {
		t.Fatalf("Allocate of dfl-port.0 by its own recovered holder: %v", err)
	}
	if rec, ok := n.state.Claim(h.UID); !ok || rec.Name != intelDomain+"/"+fixtureAF0 {
		t.Fatalf("record after the Allocate: %+v, want it to name resource %s", rec, fixtureAF0)
	}
}
