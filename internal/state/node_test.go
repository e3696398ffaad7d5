package state_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// holder is a claim holder named after i.
func holder(name string) state.Holder {
	return state.Holder{UID: types.UID("uid-" + name), Namespace: "default", Name: name}
}

// legacy is a legacy device-plugin holder (see isLegacy).
func legacy(name string) state.Holder {
	return state.Holder{UID: types.UID("legacy-" + name), Namespace: "device-plugin", Name: name}
}

// isLegacy is the supersede rule of the legacy endpoint in these tests.
func isLegacy(uid types.UID) bool { return strings.HasPrefix(string(uid), "legacy-") }

// ask asks for afu with the given policy.
func ask(afu string, policy v1alpha1.ProgrammingPolicy) *v1alpha1.FpgaConfig {
	return &v1alpha1.FpgaConfig{AFUID: afu, Programming: policy}
}

func request(device string, cfg *v1alpha1.FpgaConfig) []state.DeviceRequest {
	return []state.DeviceRequest{{Device: device, Requests: []string{"fpga"}, Config: cfg}}
}

// preparedNode is a node with one card whose port is prepared for h (cfg
// is the request's config, opts Prepare's); it returns the port's device
// name.
func preparedNode(t *testing.T, h state.Holder, cfg *v1alpha1.FpgaConfig, opts ...state.PrepareOption) (*testnode.Node, string) {
	t.Helper()
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	if _, err := n.State.Prepare(context.Background(), h, request(dev, cfg), devs, opts...); err != nil {
		t.Fatal(err)
	}
	return n, dev
}

// checkConsistent checks what must hold between operations: every held
// device's holder has a record with it; every completed record has its CDI
// spec and every spec a completed record; the checkpoint on disk says what
// the State says.
func checkConsistent(t testing.TB, n *testnode.Node) {
	t.Helper()
	holds := n.State.Holders()
	byHolder := map[types.UID][]string{}
	for dev, uid := range holds {
		byHolder[uid] = append(byHolder[uid], dev)
	}
	for uid, devs := range byHolder {
		rec, ok := n.State.Claim(uid)
		if !ok {
			t.Fatalf("devices %v are held by %s, which has no record", devs, uid)
		}
		var recorded []string
		for _, d := range rec.Devices {
			recorded = append(recorded, d.Device)
		}
		sort.Strings(devs)
		sort.Strings(recorded)
		if !slices.Equal(devs, recorded) {
			t.Fatalf("%s holds %v but its record has %v", uid, devs, recorded)
		}
		spec, err := n.CDI.ClaimSpecExists(string(uid))
		if err != nil {
			t.Fatal(err)
		}
		if spec != (rec.Phase == state.PhaseCompleted) {
			t.Fatalf("%s is %s and its CDI spec exists: %v", uid, rec.Phase, spec)
		}
	}
	specs, err := n.CDI.ListClaimSpecs()
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range specs {
		if _, ok := byHolder[types.UID(uid)]; !ok {
			t.Fatalf("CDI spec of %s, which holds nothing", uid)
		}
	}
	b, err := os.ReadFile(filepath.Join(n.DataDir, checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.Read(b)
	if err != nil {
		t.Fatalf("checkpoint on disk: %v", err)
	}
	onDisk := map[string]types.UID{}
	for uid, rec := range cp.Claims {
		for _, d := range rec.Devices {
			onDisk[d.Device] = types.UID(uid)
		}
	}
	if !maps.Equal(onDisk, holds) {
		t.Fatalf("checkpoint on disk holds %v, the state %v", onDisk, holds)
	}
}

// afuID reads a simulated port's afu_id.
func afuID(t testing.TB, n *testnode.Node, device string) string {
	t.Helper()
	_, port, ok := n.Devices(t).FindPort(device)
	if !ok {
		t.Fatalf("no device %s", device)
	}
	id, err := port.ReadAFUID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// reboot makes n's node look rebooted: another boot ID, and the region of
// port erased (the default AFU loaded). The next State started on it
// (testnode.Options.Restart) reads the new boot ID.
func reboot(t testing.TB, n *testnode.Node, port *discovery.Port) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.Sim.Root, "proc/sys/kernel/random/boot_id"), []byte("another-boot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, p, err := n.Sim.Port(port.Node.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Sim.SetAFUID(p, simnode.DefaultAFUID); err != nil {
		t.Fatal(err)
	}
}
