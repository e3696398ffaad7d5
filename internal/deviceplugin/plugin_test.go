package deviceplugin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func numa(id int64) *pluginapi.TopologyInfo {
	return &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: id}}}
}

// TestAFMode: a 2-card node with the Intel fixture's IDs registers the
// fixture's af resources, one per AFU, a device per port named after the
// port, and Allocate hands out exactly that port with the DRA path's env
// and CDI device.
func TestAFMode(t *testing.T) {
	for _, driver := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(driver), func(t *testing.T) {
			n := startNode(t, nodeOptions{sim: simnode.Options{Driver: driver}, cdi: true})
			regs := n.kubelet.waitRegistrations(t, 2)
			prefix := "dfl-port."
			if driver == discovery.DriverOPAE {
				prefix = "intel-fpga-port."
			}
			want := map[string]string{intelDomain + "/" + fixtureAF0: prefix + "0", intelDomain + "/" + fixtureAF1: prefix + "1"}
			if diff := cmp.Diff(keys(want), keys(regs)); diff != "" {
				t.Fatalf("registered resources (-want +got):\n%s", diff)
			}
			for i, res := range []string{intelDomain + "/" + fixtureAF0, intelDomain + "/" + fixtureAF1} {
				reg := regs[res]
				if reg.Version != pluginapi.Version || !reg.Options.GetGetPreferredAllocationAvailable() || reg.Options.GetPreStartRequired() {
					t.Errorf("%s: registration %+v, want version %s, preferred allocation, no pre-start", res, reg, pluginapi.Version)
				}
				c := n.client(t, reg)
				opts, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
				if err != nil || !opts.GetPreferredAllocationAvailable {
					t.Errorf("%s: GetDevicePluginOptions = %v, %v", res, opts, err)
				}
				devID := want[res]
				list := watch(t, c)()
				wantList := []*pluginapi.Device{{ID: devID, Health: pluginapi.Healthy, Topology: numa(int64(i))}}
				if diff := cmp.Diff(wantList, list, protocmp.Transform()); diff != "" {
					t.Errorf("%s: ListAndWatch (-want +got):\n%s", res, diff)
				}

				got, err := allocate(t, c, devID)
				if err != nil {
					t.Fatalf("Allocate(%s): %v", devID, err)
				}
				card, port, err := n.sim.Port(devID)
				if err != nil {
					t.Fatal(err)
				}
				afu := simnode.DefaultAFUID
				if i == 1 {
					afu = simnode.SecondAFUID
				}
				wantResp := &pluginapi.ContainerAllocateResponse{
					Devices: []*pluginapi.DeviceSpec{{ContainerPath: "/dev/" + devID, HostPath: port.DevPath, Permissions: "rw"}},
					Envs: map[string]string{
						"FPGA_PORTS":         "/dev/" + devID,
						"FPGA_AFU_IDS":       afu,
						"FPGA_INTERFACE_IDS": simnode.DefaultInterfaceID,
						"ACCELERATOR_UNITS":  card.PCIAddress,
					},
					CdiDevices: []*pluginapi.CDIDevice{{Name: cdiVendor + "/port=deviceplugin-af-" + devName(card, 0) + "-" + devName(card, 0)}},
				}
				if diff := cmp.Diff(wantResp, got, protocmp.Transform()); diff != "" {
					t.Errorf("%s: Allocate (-want +got):\n%s", res, diff)
				}
				if h := n.state.Holders()[devName(card, 0)]; string(h) != "deviceplugin-af-"+devName(card, 0) {
					t.Errorf("%s: port held by %q, want the legacy holder", res, h)
				}
				checkSpecNodes(t, n, got.CdiDevices[0].Name, []string{"/dev/" + devID})
			}
		})
	}
}

// TestRegionMode: region mode advertises one resource per interface ID,
// a device per card named after its FME; a container gets every port node
// of its card, never the FME, plus the programming hook's CDI device.
func TestRegionMode(t *testing.T) {
	const hook = cdiVendor + "/hook=program"
	for _, tc := range []struct {
		driver       discovery.KernelDriver
		portsPerCard int
		fme, port    string
	}{
		{discovery.DriverDFL, 2, "dfl-fme.", "dfl-port."},
		{discovery.DriverOPAE, 1, "intel-fpga-fme.", "intel-fpga-port."},
	} {
		t.Run(string(tc.driver), func(t *testing.T) {
			n := startNode(t, nodeOptions{
				sim:  simnode.Options{Driver: tc.driver, PortsPerCard: tc.portsPerCard},
				mode: deviceplugin.ModeRegion, cdi: true, hookDevice: hook,
			})
			regs := n.kubelet.waitRegistrations(t, 1)
			reg := regs[intelDomain+"/"+fixtureRegion]
			if reg == nil {
				t.Fatalf("registered %v, want %s/%s", keys(regs), intelDomain, fixtureRegion)
			}
			c := n.client(t, reg)
			wantList := []*pluginapi.Device{
				{ID: tc.fme + "0", Health: pluginapi.Healthy, Topology: numa(0)},
				{ID: tc.fme + "1", Health: pluginapi.Healthy, Topology: numa(1)},
			}
			if diff := cmp.Diff(wantList, watch(t, c)(), protocmp.Transform()); diff != "" {
				t.Errorf("ListAndWatch (-want +got):\n%s", diff)
			}

			got, err := allocate(t, c, tc.fme+"1")
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			card := n.sim.Cards[1]
			var nodes, units, afus []string
			wantResp := &pluginapi.ContainerAllocateResponse{}
			for k, p := range card.Ports {
				nodes = append(nodes, "/dev/"+p.Name)
				units = append(units, p.PCIAddress)
				wantResp.Devices = append(wantResp.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/" + p.Name, HostPath: p.DevPath, Permissions: "rw"})
				wantResp.CdiDevices = append(wantResp.CdiDevices, &pluginapi.CDIDevice{Name: cdiVendor + "/port=deviceplugin-region-" + devName(card, 0) + "-" + devName(card, k)})
				afus = append(afus, []string{simnode.DefaultAFUID, simnode.SecondAFUID}[(card.Index*tc.portsPerCard+k)%2])
			}
			if !strings.HasPrefix(nodes[0], "/dev/"+tc.port) {
				t.Fatalf("simulated card's first port is %s, want a %s node", nodes[0], tc.port)
			}
			wantResp.CdiDevices = append(wantResp.CdiDevices, &pluginapi.CDIDevice{Name: hook})
			wantResp.Envs = map[string]string{
				"FPGA_PORTS":         strings.Join(nodes, ","),
				"FPGA_AFU_IDS":       strings.Join(afus, ","),
				"FPGA_INTERFACE_IDS": strings.TrimSuffix(strings.Repeat(simnode.DefaultInterfaceID+",", len(nodes)), ","),
				"ACCELERATOR_UNITS":  strings.Join(units, ","),
			}
			if diff := cmp.Diff(wantResp, got, protocmp.Transform()); diff != "" {
				t.Errorf("Allocate (-want +got):\n%s", diff)
			}
			for _, d := range got.Devices {
				if strings.Contains(d.HostPath, "fme") || strings.Contains(d.ContainerPath, "fme") {
					t.Errorf("the FME node was handed out: %+v", d)
				}
			}
			checkSpecNodes(t, n, got.CdiDevices[0].Name, nodes)
			for k := range card.Ports {
				if h := n.state.Holders()[devName(card, k)]; !deviceplugin.IsRegionHolder(h) {
					t.Errorf("port %d of the card is held by %q, want a region holder", k, h)
				}
			}
		})
	}
}

// TestHealthStreamed: a port error register going non-zero, then back to
// zero, reaches the kubelet through ListAndWatch.
func TestHealthStreamed(t *testing.T) {
	n := startNode(t, nodeOptions{})
	reg := n.kubelet.waitRegistrations(t, 2)[intelDomain+"/"+fixtureAF0]
	next := watch(t, n.client(t, reg))
	if got := next(); len(got) != 1 || got[0].Health != pluginapi.Healthy {
		t.Fatalf("first list %v, want dfl-port.0 healthy", got)
	}
	setPortErrors(t, n, "dfl-port.0", "0x1")
	if got := next(); len(got) != 1 || got[0].ID != "dfl-port.0" || got[0].Health != pluginapi.Unhealthy {
		t.Fatalf("after a port error: %v, want dfl-port.0 unhealthy", got)
	}
	setPortErrors(t, n, "dfl-port.0", "0x0")
	if got := next(); len(got) != 1 || got[0].Health != pluginapi.Healthy {
		t.Fatalf("after clearing the error: %v, want dfl-port.0 healthy", got)
	}
}

// setPortErrors writes value into the error register of the port whose
// node is name and has the endpoint read the devices again.
func setPortErrors(t *testing.T, n *testNode, name, value string) {
	t.Helper()
	_, port, err := n.sim.Port(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.sim.SetPortErrors(port, value); err != nil {
		t.Fatal(err)
	}
	n.plugin.RefreshDevices()
}

// TestKubeletRestart: the kubelet deletes every socket in the directory
// and comes back; the endpoint serves its sockets again and re-registers
// every resource without a poll (CheckInterval is an hour).
func TestKubeletRestart(t *testing.T) {
	n := startNode(t, nodeOptions{})
	first := n.kubelet.waitRegistrations(t, 2)
	k := n.kubelet.restart(t)
	again := k.waitRegistrations(t, 2)
	if diff := cmp.Diff(first, again, protocmp.Transform()); diff != "" {
		t.Errorf("re-registration differs (-before +after):\n%s", diff)
	}
	reg := again[intelDomain+"/"+fixtureAF1]
	if got := watch(t, n.client(t, reg))(); len(got) != 1 || got[0].ID != "dfl-port.1" {
		t.Errorf("ListAndWatch on the re-created socket: %v, want dfl-port.1", got)
	}
	// Stopping removes the endpoint's sockets, not the kubelet's.
	n.plugin.Stop()
	if left := dirNames(t, n.dir); !cmp.Equal(left, []string{deviceplugin.KubeletSocket}) {
		t.Errorf("after Stop the directory holds %v, want only %s", left, deviceplugin.KubeletSocket)
	}
}

// TestKubeletStartsLater: an endpoint started before the kubelet
// registers once kubelet.sock appears.
func TestKubeletStartsLater(t *testing.T) {
	n := startNode(t, nodeOptions{lateKubelet: true})
	n.kubelet.waitRegistrations(t, 2)
}

// TestDRAHoldRefused: a port a DRA claim holds is advertised unhealthy and
// refused by Allocate; a port held here is refused to a DRA claim.
func TestDRAHoldRefused(t *testing.T) {
	claim := state.Holder{UID: "0e7f4a3b-1c2d-4e5f-8a9b-0c1d2e3f4a5b", Namespace: "default", Name: "claim-1"}
	n := startNode(t, nodeOptions{before: func(st *state.State, res *discovery.Result, _ *simnode.Node) {
		if _, err := st.Prepare(context.Background(), claim, []state.DeviceRequest{{Device: "fpga-0000-01-00-0-p0"}}, res); err != nil {
			t.Fatal(err)
		}
	}})
	regs := n.kubelet.waitRegistrations(t, 2)
	c0 := n.client(t, regs[intelDomain+"/"+fixtureAF0])
	if got := watch(t, c0)(); len(got) != 1 || got[0].Health != pluginapi.Unhealthy {
		t.Errorf("port held by a claim is listed %v, want unhealthy", got)
	}
	_, err := allocate(t, c0, "dfl-port.0")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "default/claim-1") {
		t.Errorf("Allocate of a claim's port: %v, want FailedPrecondition naming the claim", err)
	}
	if h := n.state.Holders()["fpga-0000-01-00-0-p0"]; h != claim.UID {
		t.Errorf("claim's hold was superseded by %q", h)
	}

	c1 := n.client(t, regs[intelDomain+"/"+fixtureAF1])
	if _, err := allocate(t, c1, "dfl-port.1"); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	other := state.Holder{UID: "b2c1d0e9-f8a7-4b6c-9d5e-4f3a2b1c0d9e", Namespace: "default", Name: "claim-2"}
	if _, err := n.state.Prepare(context.Background(), other, []state.DeviceRequest{{Device: "fpga-0000-02-00-0-p0"}}, n.plugin.Devices()); !errors.Is(err, state.ErrDeviceHeld) {
		t.Errorf("DRA prepare of a device-plugin port: %v, want ErrDeviceHeld", err)
	}
}

// TestSupersede: a later Allocate of a device releases the earlier legacy
// holder of any of its ports, with its CDI spec.
func TestSupersede(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{simnode.DefaultAFUID}}, cdi: true})
	regs := n.kubelet.waitRegistrations(t, 1)
	c := n.client(t, regs[intelDomain+"/"+fixtureAF0])
	const p0, p1 = "fpga-0000-01-00-0-p0", "fpga-0000-01-00-0-p1"
	if _, err := allocate(t, c, "dfl-port.1", "dfl-port.0"); err != nil {
		t.Fatal(err)
	}
	h := n.state.Holders()
	if h[p0] != "deviceplugin-af-"+p0 || h[p1] != "deviceplugin-af-"+p0 {
		t.Fatalf("holders after allocating both: %v", h)
	}
	if _, err := allocate(t, c, "dfl-port.1"); err != nil {
		t.Fatal(err)
	}
	h = n.state.Holders()
	if _, held := h[p0]; held || h[p1] != "deviceplugin-af-"+p1 {
		t.Fatalf("holders after re-allocating port 1: %v, want port 0 free and port 1 held alone", h)
	}
	if specs := specFiles(t, n); len(specs) != 1 || !strings.Contains(specs[0], p1) {
		t.Errorf("CDI specs %v, want only the new holder's", specs)
	}
	// Allocating the same device again keeps the holder.
	if _, err := allocate(t, c, "dfl-port.1"); err != nil {
		t.Fatal(err)
	}
	if h := n.state.Holders(); h[p1] != "deviceplugin-af-"+p1 {
		t.Errorf("holders after the same allocation: %v", h)
	}
	if _, err := allocate(t, c, "dfl-port.7"); status.Code(err) != codes.NotFound {
		t.Errorf("Allocate of an unknown device: %v, want NotFound", err)
	}
}

// TestPreferredAllocationOverSocket: with two ports on each of two cards,
// a request for two prefers one card.
func TestPreferredAllocationOverSocket(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{PortsPerCard: 2, AFUIDs: []string{simnode.DefaultAFUID}}})
	c := n.client(t, n.kubelet.waitRegistrations(t, 1)[intelDomain+"/"+fixtureAF0])
	resp, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"dfl-port.0", "dfl-port.2", "dfl-port.3"}, AllocationSize: 2,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.ContainerResponses[0].DeviceIDs; !cmp.Equal(got, []string{"dfl-port.2", "dfl-port.3"}) {
		t.Errorf("preferred %v, want both ports of the second card", got)
	}
}

// devName is the DRA device name of port k of a simulated card.
func devName(c *simnode.Card, k int) string {
	return (&discovery.Port{PCIAddress: c.PCIAddress, ID: c.Ports[k].ID}).DeviceName()
}

// checkSpecNodes reads the CDI spec of a qualified device the way a
// runtime does and checks the device nodes it injects.
func checkSpecNodes(t *testing.T, n *testNode, device string, want []string) {
	t.Helper()
	_, name, _ := strings.Cut(device, "=")
	uid := name[:strings.LastIndex(name, "-fpga-")]
	spec, err := cdiapi.ReadSpec(filepath.Join(n.cdiDir, cdiVendor+"-port_"+uid+".json"), 0)
	if err != nil {
		t.Fatalf("read CDI spec of %s: %v", device, err)
	}
	var got []string
	for _, d := range spec.Devices {
		for _, dn := range d.ContainerEdits.DeviceNodes {
			got = append(got, dn.Path)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CDI spec device nodes (-want +got):\n%s", diff)
	}
}

func specFiles(t *testing.T, n *testNode) []string {
	t.Helper()
	return dirNames(t, n.cdiDir)
}

// dirNames returns the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestPreferredAllocationSkipsUnavailable: GetPreferredAllocation never
// proposes a device that cannot be allocated when another one can: one
// the endpoint has reported unhealthy (the kubelet may ask before it read
// the update), and one whose port a DRA-side holder (a claim, an admin's
// programming) took after the device list was sent. The kubelet takes a
// full preferred answer as it is, and an Allocate the endpoint refuses
// fails the pod for good.
func TestPreferredAllocationSkipsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, n *testNode, next func() []*pluginapi.Device)
	}{
		{
			name: "unhealthy",
			make: func(t *testing.T, n *testNode, next func() []*pluginapi.Device) {
				setPortErrors(t, n, "dfl-port.0", "0x1")
				if got := next(); len(got) != 2 || got[0].ID != "dfl-port.0" || got[0].Health != pluginapi.Unhealthy {
					t.Fatalf("after a port error: %v, want dfl-port.0 unhealthy", got)
				}
			},
		},
		{
			name: "held by a claim",
			make: func(t *testing.T, n *testNode, _ func() []*pluginapi.Device) {
				claim := state.Holder{UID: "0e7f4a3b-1c2d-4e5f-8a9b-0c1d2e3f4a5b", Namespace: "default", Name: "claim-1"}
				if _, err := n.state.Prepare(context.Background(), claim, []state.DeviceRequest{{Device: "fpga-0000-01-00-0-p0"}}, n.plugin.Devices()); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 1, PortsPerCard: 2, AFUIDs: []string{simnode.DefaultAFUID}}})
			c := n.client(t, n.kubelet.waitRegistrations(t, 1)[intelDomain+"/"+fixtureAF0])
			next := watch(t, c)
			if got := next(); len(got) != 2 {
				t.Fatalf("first list %v, want two devices", got)
			}
			tc.make(t, n, next)
			resp, err := c.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: []string{"dfl-port.0", "dfl-port.1"},
				AllocationSize:     1,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.ContainerResponses[0].DeviceIDs; !slices.Equal(got, []string{"dfl-port.1"}) {
				t.Fatalf("preferred %v, want [dfl-port.1]: dfl-port.0 cannot be allocated", got)
			}
		})
	}
}
