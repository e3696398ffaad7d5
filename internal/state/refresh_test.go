package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// wantNode fails unless uid's spec names dev's node as devs has it, now
// or, rewritten in the background when an operation ended, within a few
// seconds.
func wantNode(t *testing.T, n *testnode.Node, uid, dev string, devs *discovery.Result) {
	t.Helper()
	_, port, _ := devs.FindPort(dev)
	var got []specNode
	for deadline := time.Now().Add(5 * time.Second); ; {
		got = specNodes(t, n, uid)
		if len(got) == 1 && got[0].Path == port.Node.Path && got[0].Minor == int64(port.Node.Minor) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("spec of %s names %+v; %s is %s %d:%d now (another card's port gets into a restarted container)", uid, got, dev, port.Node.Path, port.Node.Major, port.Node.Minor)
}

// refresh calls RefreshSpecs and fails on its error.
func refresh(t *testing.T, n *testnode.Node, devs *discovery.Result) {
	t.Helper()
	if err := n.State.RefreshSpecs(devs); err != nil {
		t.Fatal(err)
	}
}

// twoCards is a node of two cards with h prepared on card 0's port, unless
// h is empty; it returns the node, its devices and that port's name.
func twoCards(t *testing.T, opts testnode.Options, h state.Holder) (*testnode.Node, *discovery.Result, string) {
	t.Helper()
	opts.Sim = simnode.Options{Cards: 2}
	n := testnode.New(t, opts)
	devs := n.Devices(t)
	dev := devs.Cards[0].Ports[0].DeviceName()
	if h.UID != "" {
		if _, err := n.State.Prepare(context.Background(), h, request(dev, nil), devs); err != nil {
			t.Fatal(err)
		}
	}
	return n, devs, dev
}

// heldAtProgrammed returns OnStep hooks that hold uid's programming after
// it programmed, until release is closed, and tell inProg when it is held.
func heldAtProgrammed(uid types.UID) (opts testnode.Options, inProg chan struct{}, release chan struct{}) {
	release, inProg = make(chan struct{}), make(chan struct{}, 1)
	opts.OnStep = func(s state.Step, h types.UID) {
		if s == state.StepProgrammed && h == uid {
			inProg <- struct{}{}
			<-release
		}
	}
	return opts, inProg, release
}

// without is devs without its card-th card, as a pass that left it out.
func without(devs *discovery.Result, card int) *discovery.Result {
	out := *devs
	out.Cards = append(append([]*discovery.Card{}, devs.Cards[:card]...), devs.Cards[card+1:]...)
	return &out
}

// swap enumerates the first ports of cards 0 and 1 anew (simnode.SwapPorts).
func swap(t *testing.T, n *testnode.Node) {
	t.Helper()
	if err := simnode.SwapPorts(n.Sim.Root, n.Sim.Cards[0].Ports[0].SysfsPath, n.Sim.Cards[1].Ports[0].SysfsPath); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshAfterCardLeftOut: a pass that left card 0 out (a stuck read)
// does not lose what x's spec was written from: when card 0 comes back
// renumbered, x's spec is rewritten.
func TestRefreshAfterCardLeftOut(t *testing.T) {
	n, devs0, devX := twoCards(t, testnode.Options{}, holder("x"))
	refresh(t, n, devs0) // Activate
	refresh(t, n, without(devs0, 0))
	swap(t, n)
	devs1 := n.Devices(t)
	refresh(t, n, devs1)
	wantNode(t, n, "uid-x", devX, devs1)
}

// renumberedWhileBusy prepares holder x on card 0's port with a node
// built on opts, programming held (heldAtProgrammed's inProg and release)
// while the cards are enumerated anew and RefreshSpecs sees it (and skips
// x, busy). It returns the node, x's port, the new result, and resume,
// which lets the programming end and returns the prepare's error.
func renumberedWhileBusy(t *testing.T, opts testnode.Options, inProg, release chan struct{}) (n *testnode.Node, devX string, devs1 *discovery.Result, resume func() error) {
	t.Helper()
	n, devs0, devX := twoCards(t, opts, state.Holder{})
	refresh(t, n, devs0)
	done := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(context.Background(), holder("x"), request(devX, ask(testnode.NewAFU, "")), devs0)
		done <- err
	}()
	<-inProg
	swap(t, n)
	devs1 = n.Devices(t)
	refresh(t, n, devs1) // x is busy: skipped
	return n, devX, devs1, func() error {
		close(release)
		return <-done
	}
}

// TestRefreshOfABusyHolder: a prepare that was programming while the
// cards were renumbered is skipped by the RefreshSpecs that saw the
// change, then writes its spec from the result it started with; the spec
// is rewritten once it ended.
func TestRefreshOfABusyHolder(t *testing.T) {
	opts, inProg, release := heldAtProgrammed("uid-x")
	n, devX, devs1, resume := renumberedWhileBusy(t, opts, inProg, release)
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	refresh(t, n, devs1) // any later pass (a health flip)
	wantNode(t, n, "uid-x", devX, devs1)
}

// stalePrepare is a node whose cards were enumerated anew after holder x
// was prepared on card 0's port, and RefreshSpecs saw it; x is then
// prepared again, answered from its record with the result from before
// (the driver reads Devices() before State.Prepare), which writes its spec
// from that result. It returns the node, x's port and the new result.
func stalePrepare(t *testing.T) (*testnode.Node, string, *discovery.Result) {
	t.Helper()
	n, devs0, devX := twoCards(t, testnode.Options{}, holder("x"))
	refresh(t, n, devs0)
	swap(t, n)
	devs1 := n.Devices(t)
	refresh(t, n, devs1)
	if _, err := n.State.Prepare(context.Background(), holder("x"), request(devX, nil), devs0); err != nil {
		t.Fatal(err)
	}
	return n, devX, devs1
}

// TestRefreshAfterAStalePrepare: a prepare answered from the record with
// the result it read before the change (the driver reads Devices() before
// State.Prepare) rewrites the spec after RefreshSpecs fixed it; it is
// fixed again.
func TestRefreshAfterAStalePrepare(t *testing.T) {
	n, devX, devs1 := stalePrepare(t)
	refresh(t, n, devs1)
	wantNode(t, n, "uid-x", devX, devs1)
}

// TestRefreshWritesWhatRestoreCouldNot: Restore could not write x's spec
// (card 0 left out of its scan, the CDI tmpfs emptied by a reboot); a
// RefreshSpecs that sees card 0 writes it.
func TestRefreshWritesWhatRestoreCouldNot(t *testing.T) {
	n1, _, _ := twoCards(t, testnode.Options{}, holder("x"))
	ctx := context.Background()
	n1.Stop()
	if err := os.Remove(n1.CDI.SpecPath("uid-x")); err != nil { // reboot: tmpfs
		t.Fatal(err)
	}
	n2 := testnode.New(t, testnode.Options{Restart: n1, NoRestore: true})
	_, _ = n2.State.Restore(ctx, without(n2.Devices(t), 0)) // card 0 left out: its spec cannot be written
	devs := n2.Devices(t)
	refresh(t, n2, devs) // Activate
	refresh(t, n2, devs)
	if _, err := os.Stat(n2.CDI.SpecPath("uid-x")); err != nil {
		t.Fatalf("claim x, completed, has no CDI spec although its card is back: %v", err)
	}
}

// TestRefreshAfterProgramHeld: the programming hook's job (ProgramHeld),
// which is no operation, writes the spec from the result the hook read
// before the change, after RefreshSpecs wrote it from the new one; the
// spec is rewritten once the job ended.
func TestRefreshAfterProgramHeld(t *testing.T) {
	opts, inProg, release := heldAtProgrammed("legacy-x")
	n, devs0, devX := twoCards(t, opts, legacy("x"))
	ctx := context.Background()
	refresh(t, n, devs0)
	done := make(chan error, 1)
	go func() {
		_, err := n.State.ProgramHeld(ctx, "legacy-x", devX, simnode.DefaultInterfaceID, testnode.NewAFU, devs0)
		done <- err
	}()
	<-inProg
	swap(t, n)
	devs1 := n.Devices(t)
	refresh(t, n, devs1)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	refresh(t, n, devs1)
	wantNode(t, n, "legacy-x", devX, devs1)
}

// TestRewriteEndsBeforeWaitIdle: a spec rewrite started in the background
// when an operation ended (its spec was written from an older result) is
// over once WaitIdle returns: a stopping daemon that hands the node to the
// next writes no spec after that.
func TestRewriteEndsBeforeWaitIdle(t *testing.T) {
	// The rewrite starts as the stale prepare's operation ends.
	n, devX, devs1 := stalePrepare(t)
	n.Stop()
	if err := n.State.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, port, _ := devs1.FindPort(devX)
	if got := specNodes(t, n, "uid-x"); len(got) != 1 || got[0].Path != port.Node.Path {
		t.Fatalf("spec of x names %+v once WaitIdle returned, want %s: the rewrite is still running", got, port.Node.Path)
	}
}

// TestRefreshKeepsTheVersion: a spec rewrite changes no hold, and so not
// the holder's Version: a release decided before it (the stale releaser's)
// is not refused as "prepared again".
func TestRefreshKeepsTheVersion(t *testing.T) {
	n, devs0, _ := twoCards(t, testnode.Options{}, legacy("x"))
	refresh(t, n, devs0)
	v := n.State.Version("legacy-x")
	swap(t, n)
	refresh(t, n, n.Devices(t))
	if err := n.State.Unprepare(context.Background(), "legacy-x", state.IfUnchanged(v)); err != nil {
		t.Fatalf("release decided before a spec rewrite: %v", err)
	}
}

// specAFUs is the FPGA_AFU_IDS of uid's CDI spec.
func specAFUs(t *testing.T, n *testnode.Node, uid string) string {
	t.Helper()
	b, err := os.ReadFile(n.CDI.SpecPath(uid))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		ContainerEdits struct {
			Env []string `json:"env"`
		} `json:"containerEdits"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.ContainerEdits.Env {
		if v, ok := strings.CutPrefix(e, cdi.EnvAFUIDs+"="); ok {
			return v
		}
	}
	t.Fatalf("spec of %s has no %s", uid, cdi.EnvAFUIDs)
	return ""
}

// TestSpecWriteDoesNotUndoProgramHeld: a spec write that began, with the
// holder's record as it was, before the programming hook's job
// (ProgramHeld) loaded another AFU and wrote the spec, does not end after
// it with the AFU from before: the spec, and the answer, name the AFU the
// region carries, as the record does. The write is a spec rewrite
// (RefreshSpecs) or a prepare answered from the record.
func TestSpecWriteDoesNotUndoProgramHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(n *testnode.Node, devX string, devs *discovery.Result) (state.Outcome, error)
	}{
		{"rewrite", func(n *testnode.Node, _ string, devs *discovery.Result) (state.Outcome, error) {
			return state.Outcome{}, n.State.RefreshSpecs(devs)
		}},
		{"prepare answered from the record", func(n *testnode.Node, devX string, devs *discovery.Result) (state.Outcome, error) {
			return n.State.Prepare(context.Background(), legacy("x"), request(devX, nil), devs)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, devs0, devX := twoCards(t, testnode.Options{}, legacy("x"))
			refresh(t, n, devs0)
			began, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			state.SetOnCompleted(n.State, func(uid types.UID) {
				if uid == "legacy-x" {
					once.Do(func() {
						close(began)
						<-resume
					})
				}
			})
			swap(t, n) // so that the rewrite has work to do
			devs1 := n.Devices(t)
			type result struct {
				out state.Outcome
				err error
			}
			written := make(chan result, 1)
			go func() {
				out, err := tc.write(n, devX, devs1)
				written <- result{out, err}
			}()
			<-began
			programmed := make(chan error, 1)
			go func() {
				_, err := n.State.ProgramHeld(context.Background(), "legacy-x", devX, simnode.DefaultInterfaceID, testnode.NewAFU, devs1)
				programmed <- err
			}()
			// The job runs to its end while the write waits (it
			// would be a correct order too if it waited for the write).
			if err := <-programmed; err != nil {
				t.Fatal(err)
			}
			close(resume)
			r := <-written
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := specAFUs(t, n, "legacy-x"); got != testnode.NewAFU {
				t.Fatalf("spec of x names AFU %s after ProgramHeld loaded %s: a write begun before it ended after it", got, testnode.NewAFU)
			}
			if len(r.out.Devices) == 1 && r.out.Devices[0].AFUID != testnode.NewAFU {
				t.Fatalf("prepare answered AFU %s, the region carries %s", r.out.Devices[0].AFUID, testnode.NewAFU)
			}
			wantNode(t, n, "legacy-x", devX, devs1)
		})
	}
}

// renumbered is what RenumberedDevices reports of devs, device by device.
func renumbered(n *testnode.Node, devs *discovery.Result) []string {
	var out []string
	for dev := range n.State.RenumberedDevices(devs) {
		out = append(out, dev)
	}
	slices.Sort(out)
	return out
}

// TestRenumberingUnderAHolderIsKept: a spec rewritten after the cards
// were enumerated anew leaves running containers with the number they
// were given, now the other card's port. Both ports are reported (the
// holder's and the one with its old number) and stay reported after a
// restart of the daemon, until the holder is released; a pass that left
// the card out reports nothing.
func TestRenumberingUnderAHolderIsKept(t *testing.T) {
	n, devs0, devX := twoCards(t, testnode.Options{}, holder("x"))
	devY := devs0.Cards[1].Ports[0].DeviceName()
	refresh(t, n, devs0)
	refresh(t, n, without(devs0, 0))
	if got := renumbered(n, devs0); len(got) != 0 {
		t.Fatalf("reported %v with no renumbering (a card left out of a pass)", got)
	}
	swap(t, n)
	devs1 := n.Devices(t)
	refresh(t, n, devs1)
	want := []string{devX, devY}
	slices.Sort(want)
	if got := renumbered(n, devs1); !slices.Equal(got, want) {
		t.Fatalf("reported %v after the renumbering, want %v", got, want)
	}
	n.Stop()
	n2 := testnode.New(t, testnode.Options{Restart: n})
	if got := renumbered(n2, devs1); !slices.Equal(got, want) {
		t.Fatalf("reported %v after a restart, want %v", got, want)
	}
	if err := n2.State.Unprepare(context.Background(), "uid-x"); err != nil {
		t.Fatal(err)
	}
	if got := renumbered(n2, devs1); len(got) != 0 {
		t.Fatalf("reported %v once the holder was released", got)
	}
}

// TestRestoreFindsRenumbering: the cards were enumerated anew while the
// daemon was down; the spec it finds at start is what running containers
// were given, so its stale nodes are recorded before Restore rewrites it.
// A start whose scan left the holder's card out records nothing.
func TestRestoreFindsRenumbering(t *testing.T) {
	n, devs0, devX := twoCards(t, testnode.Options{}, holder("x"))
	devY := devs0.Cards[1].Ports[0].DeviceName()
	n.Stop()
	n2 := testnode.New(t, testnode.Options{Restart: n, NoRestore: true})
	_, _ = n2.State.Restore(context.Background(), without(devs0, 0)) // x's spec cannot be written
	if got := renumbered(n2, devs0); len(got) != 0 {
		t.Fatalf("reported %v after a start whose scan left the card out", got)
	}
	n2.Stop()
	swap(t, n)
	n3 := testnode.New(t, testnode.Options{Restart: n2})
	devs1 := n3.Devices(t)
	want := []string{devX, devY}
	slices.Sort(want)
	if got := renumbered(n3, devs1); !slices.Equal(got, want) {
		t.Fatalf("reported %v after a start that found the cards renumbered, want %v", got, want)
	}
	wantNode(t, n3, "uid-x", devX, devs1)
}

// TestRenumberingFoundAfterRestoreCouldNotWrite: the cards were
// renumbered while the daemon was down, and its first scan left the
// holder's card out: Restore could neither compare nor rewrite x's spec
// (the old one, what x's running container was given, stays on disk).
// When the card comes back, RefreshSpecs rewrites the spec; the stale
// numbers must be recorded then.
func TestRenumberingFoundAfterRestoreCouldNotWrite(t *testing.T) {
	n, devs0, devX := twoCards(t, testnode.Options{}, holder("x"))
	devY := devs0.Cards[1].Ports[0].DeviceName()
	n.Stop()
	swap(t, n)
	n2 := testnode.New(t, testnode.Options{Restart: n, NoRestore: true})
	devs1 := n2.Devices(t)
	_, _ = n2.State.Restore(context.Background(), without(devs1, 0)) // card 0 left out: x's spec not written
	refresh(t, n2, devs1)
	wantNode(t, n2, "uid-x", devX, devs1)
	want := []string{devX, devY}
	slices.Sort(want)
	if got := renumbered(n2, devs1); !slices.Equal(got, want) {
		t.Fatalf("reported %v after the spec given before the renumbering was rewritten, want %v", got, want)
	}
}

// TestRebootIsNoRenumbering: with a CDI directory that survives a
// reboot (e.g. --cdi-dir=/etc/cdi), the spec Restore finds after a reboot
// was given to containers the reboot ended. Cards enumerated in another
// order after the reboot must not taint (NoExecute) the claim, whose pod
// is just being restarted.
func TestRebootIsNoRenumbering(t *testing.T) {
	n, _, _ := twoCards(t, testnode.Options{}, holder("x"))
	n.Stop()
	swap(t, n)
	if err := os.WriteFile(filepath.Join(n.Sim.Root, "proc/sys/kernel/random/boot_id"), []byte("another-boot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n2 := testnode.New(t, testnode.Options{Restart: n})
	devs1 := n2.Devices(t)
	if got := renumbered(n2, devs1); len(got) != 0 {
		t.Fatalf("reported %v as reachable by stale device numbers after a reboot, which ended every container", got)
	}
}

// hookProgramming is a node (PrepareWait 100 ms) with legacy holder x
// prepared on card 0's port, whose programming hook (ProgramHeld) is
// loading testnode.NewAFU there, held after programming until finish is
// called; finish returns the hook's error.
func hookProgramming(t *testing.T) (n *testnode.Node, devs *discovery.Result, devX string, finish func() error) {
	t.Helper()
	opts, inProg, release := heldAtProgrammed("legacy-x")
	opts.PrepareWait = 100 * time.Millisecond
	n, devs, devX = twoCards(t, opts, legacy("x"))
	programmed := make(chan error, 1)
	go func() {
		_, err := n.State.ProgramHeld(context.Background(), "legacy-x", devX, simnode.DefaultInterfaceID, testnode.NewAFU, devs)
		programmed <- err
	}()
	<-inProg
	return n, devs, devX, func() error {
		close(release)
		return <-programmed
	}
}

// TestAnsweredPrepareBoundedByPrepareWait: a prepare answered from
// the record of a holder whose device the programming hook (ProgramHeld)
// is programming must not wait for the whole programming: like every
// prepare that meets programming, it returns ErrInProgress after
// PrepareWait (or when its caller gives up) and the programming goes on.
func TestAnsweredPrepareBoundedByPrepareWait(t *testing.T) {
	n, devs, devX, finish := hookProgramming(t)
	defer func() { _ = finish() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(ctx, legacy("x"), request(devX, nil), devs)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, state.ErrInProgress) {
			t.Fatalf("Prepare during the hook's programming = %v, want ErrInProgress", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a prepare answered from the record still waits, 3 s on, for the hook's programming (PrepareWait 100ms, its context ended after 1s)")
	}
}

// TestRenumberedForgottenAtReboot: stale numbers recorded before a
// reboot are held by no container after it (the reboot ended them all):
// the holder's devices must not be reported (tainted NoExecute, its
// restarted pod evicted) after it.
func TestRenumberedForgottenAtReboot(t *testing.T) {
	n, devs0, _ := twoCards(t, testnode.Options{}, holder("x"))
	refresh(t, n, devs0)
	swap(t, n)
	devs1 := n.Devices(t)
	refresh(t, n, devs1)
	if got := renumbered(n, devs1); len(got) != 2 {
		t.Fatalf("reported %v after the renumbering, want both ports", got)
	}
	n.Stop()
	if err := os.WriteFile(filepath.Join(n.Sim.Root, "proc/sys/kernel/random/boot_id"), []byte("another-boot\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n2 := testnode.New(t, testnode.Options{Restart: n})
	if got := renumbered(n2, n2.Devices(t)); len(got) != 0 {
		t.Fatalf("reported %v after a reboot, which ended every container given a stale number", got)
	}
}

// xfpgaNode is an extra node of a port (an Alveo port's /dev/xfpga node).
var xfpgaNode = discovery.DevNode{Name: "dma.qdma.u1.0", Path: "/dev/xfpga/dma.qdma.u1.0", HostPath: "/nonexistent", Major: 240, Minor: 7}

// withExtraNode is devs, as scanned at started, where the first port of
// card on has one more node (xfpgaNode) and no other port has one; on < 0:
// none has.
func withExtraNode(devs *discovery.Result, started time.Time, on int) *discovery.Result {
	extra := map[int]discovery.DevNode{}
	if on >= 0 {
		extra[on] = xfpgaNode
	}
	return withExtraNodes(devs, started, extra)
}

// withExtraNodes is devs, as scanned at started, where the first port of
// each card in extra has that one more node, and no other port has one.
func withExtraNodes(devs *discovery.Result, started time.Time, extra map[int]discovery.DevNode) *discovery.Result {
	out := *devs
	out.Started = started
	out.Cards = slices.Clone(devs.Cards)
	for i := range out.Cards {
		c := *devs.Cards[i]
		c.Ports = slices.Clone(c.Ports)
		p := *c.Ports[0]
		p.ExtraNodes = nil
		if n, ok := extra[i]; ok {
			p.ExtraNodes = []discovery.DevNode{n}
		}
		c.Ports[0] = &p
		out.Cards[i] = &c
	}
	return &out
}

// extraNodeHolder is a node of two cards whose scan (at t0) gave card 0's
// port xfpgaNode besides its own, with holder x prepared there and its
// spec written from that scan; it returns the node, the scan without
// extra nodes, the two cards' ports and t0.
func extraNodeHolder(t *testing.T) (n *testnode.Node, scanned *discovery.Result, devX, devY string, t0 time.Time) {
	t.Helper()
	n = testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	scanned = n.Devices(t)
	devX, devY = scanned.Cards[0].Ports[0].DeviceName(), scanned.Cards[1].Ports[0].DeviceName()
	t0 = time.Now()
	devs0 := withExtraNode(scanned, t0, 0)
	if _, err := n.State.Prepare(context.Background(), holder("x"), request(devX, nil), devs0); err != nil {
		t.Fatal(err)
	}
	refresh(t, n, devs0)
	return n, scanned, devX, devY, t0
}

// TestVanishedNodeIsNoRenumbering: one scan misses one node of the
// holder's port (statNode failed: "gone since the listing; the next scan
// sees it"); nothing was renumbered, no other port has the node's number,
// and the next scan finds it again, with the same number. The holder's
// pod must not be evicted for that.
func TestVanishedNodeIsNoRenumbering(t *testing.T) {
	n, scanned, _, _, t0 := extraNodeHolder(t)
	refresh(t, n, withExtraNode(scanned, t0.Add(time.Second), -1)) // the node missed once
	devs2 := withExtraNode(scanned, t0.Add(2*time.Second), 0)
	refresh(t, n, devs2)
	if got := renumbered(n, devs2); len(got) != 0 {
		t.Fatalf("reported %v (tainted NoExecute until unprepared) after one scan missed a node that came back unchanged", got)
	}
}

// TestVanishedNumberBackElsewhere: a node of the holder's port is gone
// from every port (its spec is rewritten without it), then its number
// comes back on another card's port: the container that was given it
// reaches that port by it, so both ports are reported.
func TestVanishedNumberBackElsewhere(t *testing.T) {
	n, scanned, devX, devY, t0 := extraNodeHolder(t)
	devs1 := withExtraNode(scanned, t0.Add(time.Second), -1)
	refresh(t, n, devs1)
	if got := renumbered(n, devs1); len(got) != 0 {
		t.Fatalf("reported %v while the node is nowhere", got)
	}
	devs2 := withExtraNode(scanned, t0.Add(2*time.Second), 1)
	refresh(t, n, devs2)
	want := []string{devX, devY}
	slices.Sort(want)
	if got := renumbered(n, devs2); !slices.Equal(got, want) {
		t.Fatalf("reported %v once the vanished node's number is another port's, want %v", got, want)
	}
}

// TestWaitIdleWaitsForACommit: a prepare whose programming job ended but
// which is still writing its CDI spec and committing keeps WaitIdle
// waiting: a stopping daemon hands the node over only once it is done.
func TestWaitIdleWaitsForACommit(t *testing.T) {
	reached, release := make(chan struct{}), make(chan struct{})
	opts := testnode.Options{OnStep: func(s state.Step, h types.UID) {
		if s == state.StepSpecWritten && h == "uid-x" {
			close(reached)
			<-release
		}
	}}
	n, devs, devX := twoCards(t, opts, state.Holder{})
	done := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(context.Background(), holder("x"), request(devX, ask(testnode.NewAFU, "")), devs)
		done <- err
	}()
	<-reached
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.State.WaitIdle(ctx); err == nil {
		t.Fatal("WaitIdle returned nil while a prepare was still committing")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := n.State.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestPrepareRefusedWhileTheHookPrograms: a prepare of a holder whose
// device the programming hook (ProgramHeld) is programming starts no
// second job on it (one job per region: a second hides the first from a
// release, WaitIdle and CancelJobs); it is told the device is being
// programmed with the hook's AFU.
func TestPrepareRefusedWhileTheHookPrograms(t *testing.T) {
	n, devs, devX, finish := hookProgramming(t)
	_, err := n.State.Prepare(context.Background(), legacy("x"), request(devX, ask(simnode.SecondAFUID, v1alpha1.ProgrammingAlways)), devs, state.Rebuild())
	if perr := finish(); perr != nil {
		t.Fatal(perr)
	}
	if !errors.Is(err, state.ErrInProgress) || !strings.Contains(err.Error(), "with AFU "+testnode.NewAFU) {
		t.Fatalf("prepare while the hook programs %s: %v, want ErrInProgress naming the hook's AFU", testnode.NewAFU, err)
	}
}

// TestRenumberedNumberUnderAnotherPath: the holder's extra node keeps its
// path but gets another number, and its old number goes to a node of
// another name on the other card's port. A container reaches a device by
// its number: that port is reported with the holder's.
func TestRenumberedNumberUnderAnotherPath(t *testing.T) {
	n, scanned, devX, devY, t0 := extraNodeHolder(t)
	moved, other := xfpgaNode, xfpgaNode
	moved.Minor++
	other.Name, other.Path = "dma.qdma.u2.0", "/dev/xfpga/dma.qdma.u2.0"
	devs1 := withExtraNodes(scanned, t0.Add(time.Second), map[int]discovery.DevNode{0: moved, 1: other})
	refresh(t, n, devs1)
	want := []string{devX, devY}
	slices.Sort(want)
	if got := renumbered(n, devs1); !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v: %s's old number %d:%d is now %s's", got, want, devX, xfpgaNode.Major, xfpgaNode.Minor, devY)
	}
}

// TestPrepareWaitsForTheHook: an Allocate of a holder whose device the
// hook's job is programming (the kubelet does not retry Allocate: a
// failure fails the pod's admission) waits for the job, at most
// PrepareWait, and succeeds once it has ended: answered from the record,
// and with Rebuild (which plans anew, and starts no second job meanwhile).
func TestPrepareWaitsForTheHook(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []state.PrepareOption
	}{
		{"answered from the record", nil},
		{"rebuild", []state.PrepareOption{state.Rebuild()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, devs, devX, finish := hookProgramming(t)
			waiting := make(chan struct{})
			var once sync.Once
			state.SetOnAwaitJob(n.State, func(types.UID) { once.Do(func() { close(waiting) }) })
			done := make(chan error, 1)
			go func() {
				_, err := n.State.Prepare(context.Background(), legacy("x"), request(devX, nil), devs, tc.opts...)
				done <- err
			}()
			select {
			case <-waiting:
			case err := <-done:
				t.Fatalf("Allocate while the hook programs did not wait for it: %v", err)
			}
			if err := finish(); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("Allocate once the hook's job ended: %v", err)
			}
		})
	}
}

// TestOwnNumberUnderAnotherPathIsNoRenumbering: the holder's extra node
// is renamed (an Alveo instance u1 -> u2) but keeps its number, on the
// holder's own port, and no other port has that number. A container
// reaches a device by its number: the running container still reaches
// only its own port, and nothing is reported (tainted NoExecute, its pod
// evicted).
func TestOwnNumberUnderAnotherPathIsNoRenumbering(t *testing.T) {
	n, scanned, _, _, t0 := extraNodeHolder(t)
	renamed := xfpgaNode
	renamed.Name, renamed.Path = "dma.qdma.u2.0", "/dev/xfpga/dma.qdma.u2.0"
	devs1 := withExtraNodes(scanned, t0.Add(time.Second), map[int]discovery.DevNode{0: renamed})
	refresh(t, n, devs1)
	if got := renumbered(n, devs1); len(got) != 0 {
		t.Fatalf("reported %v (evicted) although the holder's node kept its number on the holder's own port", got)
	}
}

// TestRenumberingFoundLaterIsAnnounced: a holder busy while RefreshSpecs
// ran is rewritten in the background when its operation ends
// (recheckSpec), and that rewrite records the stale nodes: the State
// announces it (StepRenumbered, and Config.OnRenumbered, on which the
// daemon publishes its slices again), since no discovery change follows.
func TestRenumberingFoundLaterIsAnnounced(t *testing.T) {
	opts, inProg, release := heldAtProgrammed("uid-x")
	announced := make(chan struct{}, 10)
	prev := opts.OnStep
	opts.OnStep = func(s state.Step, h types.UID) {
		if s == state.StepRenumbered {
			announced <- struct{}{}
		}
		prev(s, h)
	}
	n, devX, devs1, resume := renumberedWhileBusy(t, opts, inProg, release)
	published := renumbered(n, devs1)
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	wantNode(t, n, "uid-x", devX, devs1) // the background rewrite ran
	now := renumbered(n, devs1)
	if len(published) != 0 || len(now) != 2 {
		t.Fatalf("reported %v while x was busy and %v once its spec was rewritten, want none, then both ports", published, now)
	}
	// Announced before the spec was rewritten (noteRenumbered, then
	// writeSpec), which wantNode saw.
	select {
	case <-announced:
	default:
		t.Fatalf("RenumberedDevices went from %v (published after RefreshSpecs) to %v with no announcement: the taint is never published", published, now)
	}
}
