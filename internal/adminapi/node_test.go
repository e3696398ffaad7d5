package adminapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// newAFU is in the repository but loaded on no port.
const newAFU = testnode.NewAFU

// Holders as the device-plugin endpoint names them; the test's MayProgram
// allows the region one.
const (
	regionHolder types.UID = "deviceplugin-region-fpga-0000-01-00-0-p0"
	afHolder     types.UID = "deviceplugin-af-fpga-0000-02-00-0-p0"
	port0                  = "fpga-0000-01-00-0-p0"
	port1                  = "fpga-0000-02-00-0-p0"
)

type testNode struct {
	sim     *simnode.Node
	state   *state.State
	prog    *program.SimProgrammer
	client  *adminapi.Client
	devices func() *discovery.Result
}

// startNode serves a Node over a socket: two simulated DFL cards with one
// port each, a repository with one bitstream (the default interface,
// newAFU), port 0 held for a region-mode holder and port 1 for an af-mode
// one.
func startNode(t *testing.T) *testNode {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	tn := testnode.New(t, testnode.Options{})
	n := &testNode{sim: tn.Sim, prog: tn.Programmer, state: tn.State}
	n.devices = func() *discovery.Result {
		res, err := tn.Scanner.Scan()
		if err != nil {
			t.Error(err)
		}
		return res
	}
	for _, h := range []struct {
		uid    types.UID
		device string
	}{{regionHolder, port0}, {afHolder, port1}} {
		holder := state.Holder{UID: h.uid, Namespace: "device-plugin", Name: "fpga.intel.com/some-resource"}
		if _, err := n.state.Prepare(ctx, holder, []state.DeviceRequest{{Device: h.device}}, n.devices()); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.MkdirTemp("", "x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "control.sock")
	srv, err := adminapi.Listen(ctx, path, &adminapi.Node{
		State:      n.state,
		Devices:    n.devices,
		MayProgram: func(h types.UID) bool { return h == regionHolder },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	n.client = adminapi.NewClient(path)
	return n
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestProgramRegionHolder: a port held in region mode is programmed from
// the repository by IDs, and the hold's record carries the new AFU.
func TestProgramRegionHolder(t *testing.T) {
	n := startNode(t)
	resp, err := n.client.Program(ctxTimeout(t), adminapi.ProgramRequest{Device: "/dev/dfl-port.0", InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU})
	if err != nil {
		t.Fatalf("Program: %v", err)
	}
	if !resp.Programmed || resp.Device != port0 || resp.Node != "/dev/dfl-port.0" || resp.AFUID != newAFU || filepath.Base(resp.Bitstream) != "accel.gbs" {
		t.Errorf("Program = %+v", resp)
	}
	_, port, _ := n.devices().FindPort(port0)
	if port.AFUID != newAFU {
		t.Errorf("port 0 carries %s after programming, want %s", port.AFUID, newAFU)
	}
	rec, _ := n.state.Claim(regionHolder)
	if rec.Devices[0].AFUID != newAFU || !rec.Devices[0].Programmed {
		t.Errorf("holder's record %+v, want AFU %s programmed", rec.Devices[0], newAFU)
	}
	// Loaded already: nothing to do, by any of the port's names.
	for _, name := range []string{"dfl-port.0", port0, "dfl-fme.0"} {
		resp, err = n.client.Program(ctxTimeout(t), adminapi.ProgramRequest{Device: name, InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU})
		if err != nil || resp.Programmed {
			t.Errorf("Program(%s) again = %+v, %v; want nothing programmed", name, resp, err)
		}
	}
	if got := n.prog.TotalCalls(); got != 1 {
		t.Errorf("programmer called %d times, want 1", got)
	}
}

// TestProgramRefused: what the daemon refuses, with the status the hook
// reports, and never a call to the programmer.
func TestProgramRefused(t *testing.T) {
	n := startNode(t)
	const otherIf = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		req    adminapi.ProgramRequest
		status int
	}{
		{"mismatched interface", adminapi.ProgramRequest{Device: "/dev/dfl-port.0", InterfaceID: otherIf, AFUID: newAFU}, http.StatusConflict},
		{"af-mode holder", adminapi.ProgramRequest{Device: "/dev/dfl-port.1", InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU}, http.StatusForbidden},
		{"unknown device", adminapi.ProgramRequest{Device: "/dev/dfl-port.9", InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU}, http.StatusNotFound},
		{"bad AFU ID", adminapi.ProgramRequest{Device: "/dev/dfl-port.0", InterfaceID: simnode.DefaultInterfaceID, AFUID: "../../etc/passwd"}, http.StatusBadRequest},
		{"AFU not in the repository", adminapi.ProgramRequest{Device: "/dev/dfl-port.0", InterfaceID: simnode.DefaultInterfaceID, AFUID: "00112233445566778899aabbccddeeff"}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.client.Program(ctxTimeout(t), tc.req)
			var e *adminapi.Error
			if !errors.As(err, &e) || e.Status != tc.status {
				t.Fatalf("Program = %v, want status %d", err, tc.status)
			}
			t.Logf("refusal: %v", e)
		})
	}
	// A free port: release the af holder.
	if err := n.state.Unprepare(context.Background(), afHolder); err != nil {
		t.Fatal(err)
	}
	_, err := n.client.Program(ctxTimeout(t), adminapi.ProgramRequest{Device: "dfl-port.1", InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU})
	if e := (*adminapi.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusForbidden {
		t.Errorf("Program of a free port = %v, want 403", err)
	}
	if got := n.prog.TotalCalls(); got != 0 {
		t.Errorf("programmer called %d times, want 0", got)
	}
}

// TestList reports every port with health and holder.
func TestList(t *testing.T) {
	n := startNode(t)
	if err := n.state.Unprepare(context.Background(), afHolder); err != nil {
		t.Fatal(err)
	}
	list, err := n.client.List(ctxTimeout(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Devices) != 2 {
		t.Fatalf("List = %+v, want 2 ports", list)
	}
	d0, d1 := list.Devices[0], list.Devices[1]
	if d0.Name != port0 || d0.Node != "/dev/dfl-port.0" || d0.CardName != "dfl-fme.0" || d0.Card != "0000:01:00.0" ||
		d0.InterfaceID != simnode.DefaultInterfaceID || d0.AFUID != simnode.DefaultAFUID || !d0.Healthy ||
		d0.Holder == nil || d0.Holder.UID != string(regionHolder) || d0.Holder.Namespace != "device-plugin" {
		t.Errorf("port 0 = %+v (holder %+v)", d0, d0.Holder)
	}
	if d1.Name != port1 || d1.Holder != nil || d1.NUMANode != 1 {
		t.Errorf("port 1 = %+v, want free on NUMA node 1", d1)
	}
}

// TestSocketMode: the socket is root's only.
func TestSocketMode(t *testing.T) {
	dir, err := os.MkdirTemp("", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "control.sock")
	// A stale socket from an earlier run is replaced.
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	srv, err := adminapi.Listen(ctx, path, &adminapi.Node{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != adminapi.SocketMode {
		t.Errorf("socket mode %v, want a socket with %v", fi.Mode(), adminapi.SocketMode)
	}
	// Nothing of the private directory it was bound in is left.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("the socket's directory holds %v (%v), want only the socket", entries, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind after Serve: %v", err)
	}
}

// TestAdminProgram: an administrator programs a free port through the
// daemon; a held port is refused; the port is free again afterwards.
func TestAdminProgram(t *testing.T) {
	n := startNode(t)
	held := adminapi.ProgramRequest{Device: "/dev/dfl-port.1", InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU, Admin: true}
	_, err := n.client.Program(ctxTimeout(t), held)
	if e := (*adminapi.Error)(nil); !errors.As(err, &e) || e.Status != http.StatusForbidden || !strings.Contains(e.Message, string(afHolder)) {
		t.Fatalf("admin Program of a held port = %v, want 403 naming the holder", err)
	}
	if err := n.state.Unprepare(context.Background(), afHolder); err != nil {
		t.Fatal(err)
	}
	resp, err := n.client.Program(ctxTimeout(t), held)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Programmed || resp.AFUID != newAFU || resp.Device != port1 {
		t.Fatalf("admin Program = %+v", resp)
	}
	b, err := os.ReadFile(filepath.Join(n.sim.Cards[1].Ports[0].SysfsPath, "afu_id"))
	if err != nil || strings.TrimSpace(string(b)) != newAFU {
		t.Fatalf("afu_id %q (%v), want %s", b, err, newAFU)
	}
	if _, ok := n.state.Holders()[port1]; ok {
		t.Fatal("the port stays held after admin programming")
	}
}

// TestReleaseAdminHolds: a port that an admin programming held when the
// daemon ended (kill -9 between its prepare and its release) is free
// after the next start, and no other holder is touched.
func TestReleaseAdminHolds(t *testing.T) {
	tn := testnode.New(t, testnode.Options{})
	devs := tn.Devices(t)
	admin := state.Holder{UID: types.UID("admin-program-" + port0), Namespace: "admin", Name: "fpga-dra-driver-program"}
	claim := state.Holder{UID: "uid-claim", Namespace: "default", Name: "claim"}
	for _, h := range []struct {
		holder state.Holder
		device string
	}{{admin, port0}, {claim, port1}} {
		if _, err := tn.State.Prepare(tn.Ctx, h.holder, []state.DeviceRequest{{Device: h.device}}, devs); err != nil {
			t.Fatal(err)
		}
	}
	restarted := testnode.New(t, testnode.Options{Restart: tn})
	if err := adminapi.ReleaseAdminHolds(restarted.Ctx, restarted.State); err != nil {
		t.Fatal(err)
	}
	holders := restarted.State.Holders()
	if got, ok := holders[port0]; ok {
		t.Errorf("port %s is held by %s after the start, want it free", port0, got)
	}
	if got := holders[port1]; got != claim.UID {
		t.Errorf("port %s is held by %q after the start, want %s", port1, got, claim.UID)
	}
}

// TestAdminProgramTwiceAtOnce: two administrators programming one free
// port at once with different AFUs: each that is told its AFU was loaded
// had it loaded, and one refused is told the other's admin holds the
// port.
func TestAdminProgramTwiceAtOnce(t *testing.T) {
	n := startNode(t)
	if err := n.state.Unprepare(context.Background(), afHolder); err != nil {
		t.Fatal(err)
	}
	afus := [2]string{testnode.NewAFU, testnode.SecondAFU}
	for round := range 30 {
		if err := n.sim.SetAFUID(n.sim.Cards[1].Ports[0], simnode.DefaultAFUID); err != nil {
			t.Fatal(err)
		}
		before := n.prog.TotalCalls()
		var resps [2]adminapi.ProgramResponse
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for k := range 2 {
			wg.Go(func() {
				<-start
				resps[k], errs[k] = n.client.Program(ctxTimeout(t), adminapi.ProgramRequest{Device: "/dev/dfl-port.1", InterfaceID: simnode.DefaultInterfaceID, AFUID: afus[k], Admin: true})
			})
		}
		close(start)
		wg.Wait()
		succeeded := 0
		for k, err := range errs {
			switch {
			case err != nil && !strings.Contains(err.Error(), "admin-program-"):
				t.Fatalf("round %d: admin programming of %s: %v, want success or a refusal naming the holder", round, afus[k], err)
			case err == nil && (!resps[k].Programmed || resps[k].AFUID != afus[k]):
				t.Fatalf("round %d: admin programming of %s answered %+v", round, afus[k], resps[k])
			case err == nil:
				succeeded++
			}
		}
		if calls := n.prog.TotalCalls() - before; calls != succeeded {
			t.Fatalf("round %d: %d programmings told they loaded their AFU, %d done", round, succeeded, calls)
		}
		if h, ok := n.state.Holders()[port1]; ok {
			t.Fatalf("round %d: port held by %s after both", round, h)
		}
	}
}

// TestAdminHoldEndsWithItsProgramming: an administrator's client that
// goes away while a programming that cannot be stopped (a DFL partial
// reconfiguration) outlasts the State's ReleaseWait does not leave the
// port held: it is released once the programming ended.
func TestAdminHoldEndsWithItsProgramming(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	tn := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim, Backend: testnode.Stubborn{SimProgrammer: sim},
		PrepareWait: 20 * time.Millisecond, ReleaseWait: 20 * time.Millisecond})
	devices := func() *discovery.Result { return tn.Devices(t) }
	node := &adminapi.Node{State: tn.State, Devices: devices}
	dev := devices().Ports()[0]
	reqCtx, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := node.Program(reqCtx, adminapi.ProgramRequest{Device: dev.Node.Path, InterfaceID: simnode.DefaultInterfaceID, AFUID: newAFU, Admin: true})
		done <- err
	}()
	<-started
	hangUp()
	if err := <-done; err == nil {
		t.Fatal("the admin request whose client went away succeeded")
	}
	close(gate) // the programming ends
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h, held := tn.State.Holders()[dev.DeviceName()]
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %s is still held by %s 20 s after its admin programming ended", dev.DeviceName(), h)
		}
	}
	if _, err := node.Program(ctx, adminapi.ProgramRequest{Device: dev.Node.Path, InterfaceID: simnode.DefaultInterfaceID, AFUID: testnode.SecondAFU, Admin: true}); err != nil {
		t.Fatalf("the next admin programming of the released port: %v", err)
	}
}

// TestListenLongPath: a socket path a client can connect to (107 bytes,
// the most sun_path holds with its NUL) is one Listen can serve: the
// private directory it binds in must not make the bound name longer.
func TestListenLongPath(t *testing.T) {
	dir, err := os.MkdirTemp("", "x")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	const base = "control.sock"
	pad := 107 - len(dir) - len("/") - len("/") - len(base)
	if pad < 1 {
		t.Skipf("temporary directory %s too long", dir)
	}
	path := filepath.Join(dir, strings.Repeat("d", pad), base)
	if len(path) != 107 {
		t.Fatalf("path length %d", len(path))
	}
	_, ctx := ktesting.NewTestContext(t)
	srv, err := adminapi.Listen(ctx, path, &adminapi.Node{})
	if err != nil {
		t.Fatalf("Listen on a %d-byte path: %v", len(path), err)
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	conn.Close()
	if entries, err := os.ReadDir(filepath.Dir(path)); err != nil || len(entries) != 1 {
		t.Errorf("the socket's directory holds %v (%v), want only the socket", entries, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Fatal(err)
	}
}
