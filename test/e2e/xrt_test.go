package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // the daemon's families: the model names it publishes
)

// The mixed node: the suite's Intel DFL cards and, hot-plugged by the
// first test that needs them, a U250 and a U55C. They join after the
// Intel-only tests, which count the node's devices.
var (
	alveoOnce  sync.Once
	alveoCards []*simnode.AlveoCard
	alveoErr   error
)

// mixedNode adds the Alveo cards once and returns them: the U250, then
// the U55C.
func mixedNode(t testing.TB) []*simnode.AlveoCard {
	t.Helper()
	requireCluster(t)
	alveoOnce.Do(func() {
		alveoCards, alveoErr = node.AddAlveo(context.Background(), "u250", "u55c")
	})
	if alveoErr != nil {
		t.Fatalf("add Alveo cards to the node: %v", alveoErr)
	}
	return alveoCards
}

// deviceName is the DRA device of an Alveo card.
func deviceName(c *simnode.AlveoCard) string {
	return (&discovery.Port{PCIAddress: c.UserAddress}).DeviceName()
}

// fpgaNodes lists the FPGA device nodes of either family in a probe's view,
// and any management node.
func fpgaNodes(devices map[string]string) []string {
	var out []string
	for d := range devices {
		for _, prefix := range []string{"/dev/dri/", "/dev/xfpga/", "/dev/xclmgmt", "/dev/dfl-", "/dev/intel-fpga-"} {
			if strings.HasPrefix(d, prefix) {
				out = append(out, d)
			}
		}
	}
	sort.Strings(out)
	return out
}

// publishedDevices returns the node's devices of this driver by name.
func publishedDevices(t testing.TB) map[string]resourceapi.Device {
	t.Helper()
	slices, err := nodeSlices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourceapi.Device{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			out[d.Name] = d
		}
	}
	return out
}

// stringAttr is a device's string attribute of this driver ("" when absent).
func stringAttr(d resourceapi.Device, name string) string {
	if v := d.Attributes[resourceapi.QualifiedName(driverName+"/"+name)].StringValue; v != nil {
		return *v
	}
	return ""
}

// TestAlveo1MixedNodeDiscovered: Alveo cards beside Intel cards are published
// as one device each, named after the user PF, with the shell's attributes
// and the XRT kernel driver; the Intel devices keep their names; discover
// shows the same devices.
func TestAlveo1MixedNodeDiscovered(t *testing.T) {
	requireCluster(t)
	before := publishedDevices(t)
	cards := mixedNode(t)
	ctx := context.Background()
	got := publishedDevices(t)
	for name, d := range before {
		if !strings.HasPrefix(name, "fpga-0000-") || stringAttr(d, "kernelDriver") != "dfl" {
			continue
		}
		if _, ok := got[name]; !ok {
			t.Errorf("Intel device %s is no longer published once Alveo cards joined", name)
		}
	}

	out, err := exec.CommandContext(ctx, node.Bin, "discover", "--root", node.Root, "--node-name", cluster.NodeName, "-o", "json").Output()
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	var list resourceapi.ResourceSliceList
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("decode discover output: %v\n%s", err, out)
	}
	discovered := map[string]resourceapi.Device{}
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			discovered[d.Name] = d
		}
	}

	for _, c := range cards {
		name := deviceName(c)
		for what, devs := range map[string]map[string]resourceapi.Device{"published": got, "discover shows": discovered} {
			d, ok := devs[name]
			if !ok {
				t.Errorf("%s no device %s for the %s", what, name, c.Model.Name)
				continue
			}
			want := map[string]string{
				"kernelDriver": "xrt", "interfaceID": c.Model.InterfaceIDs[0], "platform": c.Model.Platform,
				"shellTimestamp": c.Model.Timestamp, "logicUUID": c.Model.LogicID, "vendorID": "0x10ee", "deviceID": c.Model.UserDevice,
				"model": discovery.ModelName("0x10ee", c.Model.UserDevice),
			}
			for i, id := range c.Model.InterfaceIDs[1:] {
				want[fmt.Sprintf("interfaceID%d", i+2)] = id
			}
			for attr, v := range want {
				if got := stringAttr(d, attr); got != v {
					t.Errorf("%s %s: %s = %q, want %q", what, name, attr, got, v)
				}
			}
			if stringAttr(d, "serial") == "" {
				t.Errorf("%s %s: no serial", what, name)
			}
			if bus := d.Attributes["resource.kubernetes.io/pciBusID"].StringValue; bus == nil || *bus != c.UserAddress {
				t.Errorf("%s %s: pciBusID %v, want the user PF %s", what, name, bus, c.UserAddress)
			}
		}
	}
	for name := range discovered {
		if _, ok := got[name]; !ok {
			t.Errorf("discover shows %s, which the driver does not publish", name)
		}
	}
}

// TestAlveo2Programmed: a claim whose class selects the U55C by its
// interface UUID gets the sample xclbin loaded (the simulated programmer,
// through the XRT path of preparation), and the container sees exactly the
// card's user nodes and the env naming them; the slice's afuID follows.
func TestAlveo2Programmed(t *testing.T) {
	cards := mixedNode(t)
	u55c := cards[1]
	ctx := context.Background()
	ns := namespace(t, "e2e-xrt-program")
	deviceClass(t, "e2e-u55c", fmt.Sprintf("%s.interfaceID == %q && %s.programmable", attrs, simnode.U55CInterfaceID, attrs))
	claimTemplate(t, ns, "xclbin", "e2e-u55c", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleXclbinUUID})))
	probePod(t, ns, "xclbin", "xclbin")
	view, device, claim := runningProbe(t, ns, "xclbin")
	if device != deviceName(u55c) {
		t.Fatalf("claim got %s, want the U55C %s", device, deviceName(u55c))
	}
	render := "/dev/dri/" + filepath.Base(u55c.RenderPath)
	want := []string{render}
	for _, x := range u55c.XfpgaPaths {
		want = append(want, "/dev/xfpga/"+filepath.Base(x))
	}
	if got := fpgaNodes(view.Devices); !slices.Equal(got, want) {
		t.Fatalf("container sees FPGA nodes %v, want exactly the user nodes %v (never /dev/xclmgmt*, never a management xfpga node)", got, want)
	}
	if got, want := view.Devices[render], fmt.Sprintf("%d:%d", simnode.MajorDRM, 128+u55c.Index); got != want {
		t.Errorf("render node numbers %s, want %s", got, want)
	}
	for k, v := range map[string]string{
		"FPGA_PORTS": render, "FPGA_AFU_IDS": simnode.SampleXclbinUUID, "FPGA_INTERFACE_IDS": simnode.U55CInterfaceID,
		"ACCELERATOR_UNITS": u55c.UserAddress, "FPGA_DEVICE_NODES": strings.Join(want, ","),
	} {
		if view.Env[k] != v {
			t.Errorf("env %s=%q, want %q", k, view.Env[k], v)
		}
	}
	b, err := os.ReadFile(filepath.Join(u55c.UserPath, "xclbinuuid"))
	if id, _ := discovery.CanonicalID(strings.TrimSpace(string(b))); err != nil || id != simnode.SampleXclbinUUID {
		t.Fatalf("xclbinuuid %q (%v), want the loaded %s", b, err, simnode.SampleXclbinUUID)
	}
	eventually(t, "Programmed event", 30*time.Second, func() bool { return programmedEvents(t, claim) == 1 })
	eventually(t, "slice afuID republished", 30*time.Second, func() bool { return sliceAFU(ctx, device) == simnode.SampleXclbinUUID })
}

// TestAlveo3AFUIDAcrossFamilies: with one Intel port and one Alveo card
// carrying the same function, a DeviceClass on afuID serves both families:
// two pods run, one on each, and each container sees its family's nodes.
func TestAlveo3AFUIDAcrossFamilies(t *testing.T) {
	cards := mixedNode(t)
	u250 := cards[0]
	ctx := context.Background()
	const shared = "0b5e55ed0b5e55ed0b5e55ed0b5e55ed"
	intel := node.Sim.Cards[3].Ports[0] // 0000:04:00.0, which no test programs
	restore, err := os.ReadFile(filepath.Join(intel.SysfsPath, "afu_id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Sim.SetAFUID(intel, shared); err != nil {
		t.Fatal(err)
	}
	if err := node.Sim.SetXclbin(u250, shared); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Sim.SetAFUID(intel, strings.TrimSpace(string(restore))); err != nil {
			t.Errorf("restore %s: %v", intel.Name, err)
		}
		if err := node.Sim.SetXclbin(u250, ""); err != nil {
			t.Errorf("unload the U250: %v", err)
		}
	})
	intelDevice := deviceOf(intel)
	eventually(t, "both devices publish the shared afuID", 30*time.Second, func() bool {
		return sliceAFU(ctx, intelDevice) == shared && sliceAFU(ctx, deviceName(u250)) == shared
	})

	ns := namespace(t, "e2e-xrt-families")
	deviceClass(t, "e2e-shared-function", fmt.Sprintf("%s.afuID == %q", attrs, shared))
	claimTemplate(t, ns, "shared", "e2e-shared-function", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: shared, Programming: v1alpha1.ProgrammingNever})))
	probePod(t, ns, "first", "shared")
	probePod(t, ns, "second", "shared")
	got := map[string][]string{}
	for _, pod := range []string{"first", "second"} {
		view, device, _ := runningProbe(t, ns, pod)
		if view.Env["FPGA_AFU_IDS"] != shared {
			t.Errorf("pod %s on %s: FPGA_AFU_IDS %q, want %s", pod, device, view.Env["FPGA_AFU_IDS"], shared)
		}
		got[device] = fpgaNodes(view.Devices)
	}
	want := map[string][]string{
		intelDevice:      {"/dev/" + intel.Name},
		deviceName(u250): {"/dev/dri/" + filepath.Base(u250.RenderPath)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pods got devices and nodes %v, want one on each family: %v", got, want)
	}
}
