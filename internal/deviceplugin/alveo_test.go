package deviceplugin_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// alveoXclbin is the xclbin the simulated Alveo cards carry.
const alveoXclbin = "5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e"

// TestAlveoUnderAMDNames: on a node with two Intel DFL cards, a U250 and a
// U55C, in either mode, each Alveo card is one device of the resource
// AMD's device plugin named it by (amd.com/<VBNV>-<timestamp>, device ID
// the user PF's address) beside the Intel resources, and Allocate gives
// the container the card's user nodes (render node, and the U55C's xfpga
// node) with the env, never the management node and never the
// programming hook.
func TestAlveoUnderAMDNames(t *testing.T) {
	const hook = cdiVendor + "/hook=program"
	for _, tc := range []struct {
		mode  deviceplugin.Mode
		intel []string // the Intel resources beside AMD's
	}{
		{deviceplugin.ModeAF, []string{intelDomain + "/" + fixtureAF0, intelDomain + "/" + fixtureAF1}},
		{deviceplugin.ModeRegion, []string{intelDomain + "/" + fixtureRegion}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			n := startNode(t, nodeOptions{
				sim:  simnode.Options{Driver: discovery.DriverDFL, Alveo: []string{"u250", "u55c"}, AlveoXclbinUUID: alveoXclbin},
				mode: tc.mode, cdi: true, hookDevice: hook,
			})
			amd := map[string]*simnode.AlveoCard{}
			for _, c := range n.sim.Alveo {
				amd["amd.com/"+c.Model.Platform+"-"+c.Model.Timestamp] = c
			}
			want := slices.Concat(tc.intel, keys(amd))
			slices.Sort(want)
			regs := n.kubelet.waitRegistrations(t, len(want))
			if diff := cmp.Diff(want, keys(regs)); diff != "" {
				t.Fatalf("registered resources (-want +got):\n%s", diff)
			}
			for res, card := range amd {
				c := n.client(t, regs[res])
				wantList := []*pluginapi.Device{{ID: card.UserAddress, Health: pluginapi.Healthy, Topology: numa(int64(card.Index % 2))}}
				if diff := cmp.Diff(wantList, watch(t, c)(), protocmp.Transform()); diff != "" {
					t.Errorf("%s: ListAndWatch (-want +got):\n%s", res, diff)
				}

				got, err := allocate(t, c, card.UserAddress)
				if err != nil {
					t.Fatalf("%s: Allocate(%s): %v", res, card.UserAddress, err)
				}
				render := "/dev/dri/" + filepath.Base(card.RenderPath)
				nodes := []string{render}
				wantResp := &pluginapi.ContainerAllocateResponse{
					Devices: []*pluginapi.DeviceSpec{{ContainerPath: render, HostPath: card.RenderPath, Permissions: "rw"}},
					Envs: map[string]string{
						"FPGA_PORTS":         render,
						"FPGA_AFU_IDS":       alveoXclbin,
						"FPGA_INTERFACE_IDS": card.Model.InterfaceIDs[0],
						"ACCELERATOR_UNITS":  card.UserAddress,
					},
				}
				for _, x := range card.XfpgaPaths {
					path := "/dev/xfpga/" + filepath.Base(x)
					nodes = append(nodes, path)
					wantResp.Devices = append(wantResp.Devices, &pluginapi.DeviceSpec{ContainerPath: path, HostPath: x, Permissions: "rw"})
				}
				if len(nodes) > 1 {
					wantResp.Envs["FPGA_DEVICE_NODES"] = strings.Join(nodes, ",")
				}
				device := (&discovery.Port{PCIAddress: card.UserAddress}).DeviceName()
				holder := "deviceplugin-af-" + device
				wantResp.CdiDevices = []*pluginapi.CDIDevice{{Name: cdiVendor + "/port=" + holder + "-" + device}}
				if diff := cmp.Diff(wantResp, got, protocmp.Transform()); diff != "" {
					t.Errorf("%s: Allocate (-want +got):\n%s", res, diff)
				}
				for _, d := range got.Devices {
					if strings.Contains(d.HostPath, "xclmgmt") || d.HostPath == card.MgmtDevPath || strings.Contains(d.ContainerPath, "flash.m") {
						t.Errorf("%s: a management node was handed out: %+v", res, d)
					}
				}
				checkSpecNodes(t, n, got.CdiDevices[0].Name, nodes)
				if h := n.state.Holders()[device]; string(h) != holder {
					t.Errorf("%s: card held by %q, want %s", res, h, holder)
				}
			}
		})
	}
}
