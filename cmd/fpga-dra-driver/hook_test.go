package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// hookAFU is in the test repository and loaded on no port.
const hookAFU = testnode.NewAFU

// hookNode is a daemon as the hook sees it: the shared test node (two DFL
// cards, one port each, a repository with a bitstream for hookAFU), both
// ports allocated in region mode, and the control socket.
type hookNode struct {
	sim    *simnode.Node
	prog   *program.SimProgrammer
	socket string
}

func startHookNode(t *testing.T) *hookNode {
	t.Helper()
	tn := testnode.New(t, testnode.Options{})
	ctx, cancel := context.WithCancel(tn.Ctx)
	n := &hookNode{sim: tn.Sim, prog: tn.Programmer}
	st := tn.State
	devices := scanning(t, tn.Sim.Root)
	// What a region-mode Allocate of both cards leaves in the state.
	for _, p := range devices().Ports() {
		h := state.Holder{UID: types.UID("deviceplugin-region-" + p.DeviceName()), Namespace: deviceplugin.LegacyNamespace, Name: "fpga.intel.com/region-" + simnode.DefaultInterfaceID}
		if _, err := st.Prepare(ctx, h, []state.DeviceRequest{{Device: p.DeviceName()}}, devices()); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "x")
	if err != nil {
		t.Fatal(err)
	}
	n.socket = filepath.Join(dir, "control.sock")
	srv, err := adminapi.Listen(ctx, n.socket, &adminapi.Node{State: st, Devices: devices, MayProgram: deviceplugin.IsRegionHolder})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return n
}

// bundle writes an OCI bundle whose config.json has env and the device
// nodes of the named simulated ports, and returns the OCI state a runtime
// hands a hook.
func (n *hookNode) bundle(t *testing.T, env []string, ports ...string) string {
	t.Helper()
	dir := t.TempDir()
	var devices []map[string]any
	for _, name := range ports {
		_, p, err := n.sim.Port(name)
		if err != nil {
			t.Fatal(err)
		}
		devices = append(devices, map[string]any{"path": "/dev/" + p.Name, "type": "c", "major": simnode.MajorDFLPort, "minor": p.Minor})
	}
	cfg := map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"args": []string{"/app"}, "env": append([]string{"PATH=/usr/bin"}, env...)},
		"linux":      map[string]any{"devices": append(devices, map[string]any{"path": "/dev/null", "type": "c", "major": 1, "minor": 3})},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"ociVersion":"1.2.0","id":"ctr-1","status":"creating","pid":4242,"bundle":%q,"annotations":{}}`, dir)
}

// runHookCommand runs `fpga-dra-driver hook` as a runtime would.
func runHookCommand(t *testing.T, socket, stdin string) error {
	t.Helper()
	cmd := newRootCommand()
	cmd.SetArgs([]string{"hook", "--control-socket", socket})
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	return cmd.ExecuteContext(context.Background())
}

func (n *hookNode) afu(t *testing.T, port string) string {
	t.Helper()
	_, p, err := n.sim.Port(port)
	if err != nil {
		t.Fatal(err)
	}
	id, err := discovery.ReadID(filepath.Join(p.SysfsPath, "afu_id"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestHookProgramsRegion: the hook reads FPGA_REGION_0/FPGA_AFU_0 from the
// bundle (dashed, upper case: canonicalised), pairs them with the
// container's port and has the daemon program it from its repository.
func TestHookProgramsRegion(t *testing.T) {
	n := startHookNode(t)
	dashedIf := strings.ToUpper(simnode.DefaultInterfaceID[:8] + "-" + simnode.DefaultInterfaceID[8:12] + "-" + simnode.DefaultInterfaceID[12:16] + "-" + simnode.DefaultInterfaceID[16:20] + "-" + simnode.DefaultInterfaceID[20:])
	stdin := n.bundle(t, []string{"FPGA_REGION_0=" + dashedIf, "FPGA_AFU_0=" + hookAFU, "FPGA_AFU_IDS=ignored"}, "dfl-port.1")
	if err := runHookCommand(t, n.socket, stdin); err != nil {
		t.Fatalf("hook: %v", err)
	}
	if got := n.afu(t, "dfl-port.1"); got != hookAFU {
		t.Errorf("dfl-port.1 carries %s, want %s", got, hookAFU)
	}
	if got := n.afu(t, "dfl-port.0"); got != simnode.DefaultAFUID {
		t.Errorf("dfl-port.0, not the container's, carries %s", got)
	}
	if got := n.prog.TotalCalls(); got != 1 {
		t.Errorf("programmer called %d times, want 1", got)
	}
}

// TestHookProgramsTwoRegions: one region per port, in the order of n.
func TestHookProgramsTwoRegions(t *testing.T) {
	n := startHookNode(t)
	env := []string{"FPGA_REGION_1=" + simnode.DefaultInterfaceID, "FPGA_AFU_1=" + simnode.SecondAFUID, "FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=" + hookAFU}
	if err := runHookCommand(t, n.socket, n.bundle(t, env, "dfl-port.0", "dfl-port.1")); err != nil {
		t.Fatalf("hook: %v", err)
	}
	// dfl-port.1 carries SecondAFUID already: only dfl-port.0 is programmed.
	if a0, a1 := n.afu(t, "dfl-port.0"), n.afu(t, "dfl-port.1"); a0 != hookAFU || a1 != simnode.SecondAFUID {
		t.Errorf("ports carry %s, %s; want %s, %s", a0, a1, hookAFU, simnode.SecondAFUID)
	}
	if got := n.prog.TotalCalls(); got != 1 {
		t.Errorf("programmer called %d times, want 1", got)
	}
}

// TestHookRefusesMismatchedInterface: a region whose interface ID no port
// of the container has fails the container start, programming nothing.
func TestHookRefusesMismatchedInterface(t *testing.T) {
	n := startHookNode(t)
	const otherIf = "0123456789abcdef0123456789abcdef"
	err := runHookCommand(t, n.socket, n.bundle(t, []string{"FPGA_REGION_0=" + otherIf, "FPGA_AFU_0=" + hookAFU}, "dfl-port.0"))
	if err == nil {
		t.Fatal("hook succeeded, want a refusal")
	}
	for _, want := range []string{"ctr-1", "FPGA_REGION_0=" + otherIf, "/dev/dfl-port.0 (interface " + simnode.DefaultInterfaceID + ")", "region-" + otherIf} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if got := n.prog.TotalCalls(); got != 0 {
		t.Errorf("programmer called %d times, want 0", got)
	}
	if got := n.afu(t, "dfl-port.0"); got != simnode.DefaultAFUID {
		t.Errorf("dfl-port.0 carries %s after a refusal", got)
	}
}

// TestHookFailures: every failure fails the container start with a reason.
func TestHookFailures(t *testing.T) {
	n := startHookNode(t)
	for _, tc := range []struct {
		name   string
		stdin  string
		socket string
		want   string
	}{
		{"no OCI state", "not json", n.socket, "OCI state"},
		{"no bundle", `{"ociVersion":"1.2.0","id":"c"}`, n.socket, "no bundle"},
		{"missing bundle", `{"ociVersion":"1.2.0","id":"c","bundle":"/nonexistent"}`, n.socket, "config"},
		{"unpaired region", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID}, "dfl-port.0"), n.socket, "FPGA_AFU_0 is not"},
		{"bad AFU ID", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=xyz"}, "dfl-port.0"), n.socket, "FPGA_AFU_0"},
		{"no FPGA port", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=" + hookAFU}), n.socket, "no FPGA port"},
		{"more regions than ports", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=" + hookAFU, "FPGA_REGION_1=" + simnode.DefaultInterfaceID, "FPGA_AFU_1=" + hookAFU}, "dfl-port.0"), n.socket, "taken by a lower-numbered region"},
		{"AFU not in the repository", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=00112233445566778899aabbccddeeff"}, "dfl-port.0"), n.socket, "bitstream not found"},
		{"daemon not running", n.bundle(t, []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=" + hookAFU}, "dfl-port.0"), "/nonexistent/control.sock", "control socket /nonexistent/control.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runHookCommand(t, tc.socket, tc.stdin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("hook = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestHookWithoutRegions: a container that asks for no region is left
// alone, without even asking the daemon.
func TestHookWithoutRegions(t *testing.T) {
	n := startHookNode(t)
	if err := runHookCommand(t, "/nonexistent/control.sock", n.bundle(t, []string{"FPGA_PORTS=/dev/dfl-port.0"}, "dfl-port.0")); err != nil {
		t.Errorf("hook = %v, want success", err)
	}
}

// FuzzRegionRequests: the container's environment is outside input.
func FuzzRegionRequests(f *testing.F) {
	f.Add("FPGA_REGION_0=69528db6eb31577a8c3668f9faa081f6", "FPGA_AFU_0=d8424dc4-a4a3-c413-f89e-433683f9040b")
	f.Add("FPGA_REGION_01=x", "FPGA_AFU_IDS=y")
	f.Fuzz(func(t *testing.T, a, b string) {
		reqs, err := regionRequests([]string{a, b, "PATH=/bin"})
		if err != nil {
			return
		}
		for i, r := range reqs {
			if len(r.interfaceID) != 32 || len(r.afuID) != 32 {
				t.Fatalf("request %+v has non-canonical IDs", r)
			}
			if i > 0 && reqs[i-1].n >= r.n {
				t.Fatalf("requests out of order: %+v", reqs)
			}
		}
	})
}

// TestHookIgnoresBlockDeviceWithPortNumbers: device numbers are per type: a
// block device the container was given (a raw-block volume, which any pod
// may ask for) can carry the major:minor of a char FPGA port held by another
// region-mode allocation. It is not that port: the hook must not have the
// daemon program it for this container.
func TestHookIgnoresBlockDeviceWithPortNumbers(t *testing.T) {
	n := startHookNode(t)
	_, p, err := n.sim.Port("dfl-port.0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"args": []string{"/app"}, "env": []string{"FPGA_REGION_0=" + simnode.DefaultInterfaceID, "FPGA_AFU_0=" + hookAFU}},
		"linux": map[string]any{"devices": []map[string]any{
			{"path": "/dev/xvda", "type": "b", "major": simnode.MajorDFLPort, "minor": p.Minor},
		}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	stdin := fmt.Sprintf(`{"ociVersion":"1.2.0","id":"ctr-2","status":"creating","pid":4243,"bundle":%q}`, dir)
	err = runHookCommand(t, n.socket, stdin)
	if err == nil || !strings.Contains(err.Error(), "no FPGA port") {
		t.Errorf("hook = %v, want an error saying the container has no FPGA port", err)
	}
	if got := n.prog.TotalCalls(); got != 0 {
		t.Errorf("programmer called %d times for a container holding no port, want 0", got)
	}
	if got := n.afu(t, "dfl-port.0"); got != simnode.DefaultAFUID {
		t.Errorf("dfl-port.0, held by another allocation, now carries %s", got)
	}
}
