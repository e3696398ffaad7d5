package state_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// unprepareUntilDone calls Unprepare as the kubelet does: again while it
// answers ErrReleasing, a bounded number of times.
func unprepareUntilDone(t *testing.T, st *state.State, uid types.UID) {
	t.Helper()
	for range 1000 {
		err := st.Unprepare(context.Background(), uid)
		if err == nil {
			return
		}
		if !errors.Is(err, state.ErrReleasing) {
			t.Fatalf("unprepare %s: %v", uid, err)
		}
	}
	t.Fatalf("unprepare %s never finished", uid)
}

// prepareUntilDone calls Prepare as the kubelet does: again while it
// answers ErrInProgress, a bounded number of times.
func prepareUntilDone(t *testing.T, st *state.State, h state.Holder, reqs []state.DeviceRequest, devs *discovery.Result) state.Outcome {
	t.Helper()
	for range 1000 {
		out, err := st.Prepare(context.Background(), h, reqs, devs)
		if err == nil {
			return out
		}
		if !errors.Is(err, state.ErrInProgress) {
			t.Fatalf("prepare %s: %v", h, err)
		}
	}
	t.Fatalf("prepare %s never finished", h)
	return state.Outcome{}
}

// TestUnprepareWaitsForProgramming: an unprepare of a claim whose
// programming cannot be stopped answers "still releasing" and keeps the
// region held until the programming ended; only then does another claim
// get it, and its programming comes after.
func TestUnprepareWaitsForProgramming(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	var lastProgrammedFor atomic.Value
	n := testnode.New(t, testnode.Options{
		Sim: simnode.Options{Cards: 1}, Programmer: sim, Backend: testnode.Stubborn{SimProgrammer: sim},
		PrepareWait: time.Millisecond, ReleaseWait: time.Millisecond,
		OnStep: func(step state.Step, h types.UID) {
			if step == state.StepProgrammed {
				lastProgrammedFor.Store(h)
			}
		},
	})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a, b := holder("a"), holder("b")
	ctx := context.Background()

	_, err := n.State.Prepare(ctx, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs)
	if !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare with programming held at the gate: %v, want in progress", err)
	}
	<-started
	err = n.State.Unprepare(ctx, a.UID)
	if !errors.Is(err, state.ErrReleasing) || !strings.Contains(err.Error(), dev) || !strings.Contains(err.Error(), "the kubelet retries") {
		t.Fatalf("unprepare while programming runs: %v, want ErrReleasing naming the device", err)
	}
	if h := n.State.Holders()[dev]; h != a.UID {
		t.Fatalf("device held by %q while a's programming runs, want a", h)
	}
	_, err = n.State.Prepare(ctx, b, request(dev, ask(testnode.SecondAFU, v1alpha1.ProgrammingAlways)), devs)
	if !errors.Is(err, state.ErrDeviceHeld) || !strings.Contains(err.Error(), "being released") || !strings.Contains(err.Error(), a.Name) {
		t.Fatalf("another claim while a is released: %v, want it refused naming a, being released", err)
	}
	if _, err := n.State.Prepare(ctx, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); !errors.Is(err, state.ErrReleasing) {
		t.Fatalf("a prepared again while being released: %v", err)
	}

	close(gate) // the programming ends
	unprepareUntilDone(t, n.State, a.UID)
	if got := afuID(t, n, dev); got != testnode.NewAFU {
		t.Fatalf("region carries %s after a's programming ended, want %s", got, testnode.NewAFU)
	}
	prepareUntilDone(t, n.State, b, request(dev, ask(testnode.SecondAFU, v1alpha1.ProgrammingAlways)), devs)
	if got := afuID(t, n, dev); got != testnode.SecondAFU || lastProgrammedFor.Load() != b.UID {
		t.Fatalf("region carries %s, last programmed for %v: want b's %s last", got, lastProgrammedFor.Load(), testnode.SecondAFU)
	}
	if o := sim.Overlaps(); o != 0 {
		t.Fatalf("the region was programmed twice at once")
	}
	checkConsistent(t, n)
}

// TestUnprepareCancelsProgramming: a backend that can stop is stopped; the
// unprepare then succeeds at once and the region keeps what it carried.
func TestUnprepareCancelsProgramming(t *testing.T) {
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: make(chan struct{}), OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	before := afuID(t, n, dev)
	a := holder("a")
	if _, err := n.State.Prepare(context.Background(), a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare: %v, want in progress", err)
	}
	<-started
	if err := n.State.Unprepare(context.Background(), a.UID); err != nil {
		t.Fatalf("unprepare of a claim whose programming can be cancelled: %v", err)
	}
	if got := afuID(t, n, dev); got != before {
		t.Fatalf("region carries %s after the cancelled programming, want the earlier %s", got, before)
	}
	if len(n.State.Holders()) != 0 {
		t.Fatalf("held after the unprepare: %v", n.State.Holders())
	}
	checkConsistent(t, n)
}

// TestNoProgrammingForAReleasedHolder: a claim unprepared after its hold
// was recorded but before its programming started is never programmed.
func TestNoProgrammingForAReleasedHolder(t *testing.T) {
	a := holder("a")
	var n *testnode.Node
	var unprepared error
	n = testnode.New(t, testnode.Options{
		Sim: simnode.Options{Cards: 1}, ReleaseWait: time.Nanosecond,
		OnStep: func(step state.Step, h types.UID) {
			if step == state.StepStarted && h == a.UID {
				// The kubelet's unprepare arrives between the record and
				// the programming: it marks the release and answers
				// "still releasing" at once (ReleaseWait is tiny).
				unprepared = n.State.Unprepare(context.Background(), a.UID)
			}
		},
	})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	_, err := n.State.Prepare(context.Background(), a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs)
	if err == nil || !strings.Contains(err.Error(), "unprepared before programming started") {
		t.Fatalf("prepare of a claim released before programming: %v", err)
	}
	if !errors.Is(unprepared, state.ErrReleasing) {
		t.Fatalf("the first unprepare: %v, want still releasing", unprepared)
	}
	if calls := n.Programmer.TotalCalls(); calls != 0 {
		t.Fatalf("the region was programmed %d times for a released claim", calls)
	}
	unprepareUntilDone(t, n.State, a.UID)
	checkConsistent(t, n)
}

// TestFailedStartCommitLeavesNoJob: a prepare that must program but
// cannot record the hold first (the checkpoint cannot be written) leaves
// no job behind: once the disk is back the claim is released at once, the
// node is idle, and the kubelet's retried prepare programs.
func TestFailedStartCommitLeavesNoJob(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a := holder("a")
	ctx := context.Background()
	state.BreakCheckpointWrites(n.State)
	if _, err := n.State.Prepare(ctx, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); err == nil {
		t.Fatal("a prepare that could not record its hold succeeded")
	}
	if err := state.HealCheckpointWrites(n.State); err != nil {
		t.Fatal(err)
	}
	if err := n.State.Unprepare(ctx, a.UID); err != nil {
		t.Fatalf("unprepare of a claim whose programming never started: %v", err)
	}
	idle, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.State.WaitIdle(idle); err != nil {
		t.Fatalf("WaitIdle on a node that programs nothing: %v", err)
	}
	prepareUntilDone(t, n.State, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs)
	if got := afuID(t, n, dev); got != testnode.NewAFU {
		t.Fatalf("region carries %s after the retried prepare, want %s", got, testnode.NewAFU)
	}
	checkConsistent(t, n)
}

// TestSupersedeWithProgramming: a prepare that supersedes another holder
// and must program releases that holder in the record it writes before
// programming: the checkpoint on the disk never shows two holders of one
// device, and the superseded holder's CDI spec is gone before the region
// is touched.
func TestSupersedeWithProgramming(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	ctx := context.Background()
	l1, l2 := legacy("one"), legacy("two")
	if _, err := n.State.Prepare(ctx, l1, request(dev, nil), devs, state.Supersede(isLegacy)); err != nil {
		t.Fatal(err)
	}
	reqs := request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways))
	if _, err := n.State.Prepare(ctx, l2, reqs, devs, state.Supersede(isLegacy)); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("superseding prepare held at the gate: %v, want in progress", err)
	}
	<-started
	b, err := os.ReadFile(filepath.Join(n.DataDir, checkpoint.FileName))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.Read(b)
	if err != nil {
		t.Fatalf("checkpoint on the disk while the superseding holder programs: %v", err)
	}
	if _, ok := cp.Claims[string(l1.UID)]; ok {
		t.Fatalf("the checkpoint on the disk keeps the superseded %s while %s programs its device", l1.UID, l2.UID)
	}
	if ok, err := n.CDI.ClaimSpecExists(string(l1.UID)); err != nil || ok {
		t.Fatalf("the superseded holder's CDI spec is still there (%v) while its device is programmed for another", err)
	}
	close(gate)
	prepareUntilDone(t, n.State, l2, reqs, devs)
	checkConsistent(t, n)
}

// TestFailedStartCommitKeepsTheRecord: a claim prepared again after a
// reboot, whose record before programming cannot be written, keeps its
// completed record and its CDI spec, in memory and, once the disk is
// back, on the disk: no started record beside a spec.
func TestFailedStartCommitKeepsTheRecord(t *testing.T) {
	a := holder("a")
	cfg := ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)
	n, dev := preparedNode(t, a, cfg)
	req := request(dev, cfg)
	ctx := context.Background()
	reboot(t, n, n.Devices(t).Ports()[0])
	r := testnode.New(t, testnode.Options{Restart: n})
	state.BreakCheckpointWrites(r.State)
	if _, err := r.State.Prepare(ctx, a, req, r.Devices(t)); err == nil {
		t.Fatal("a prepare whose hold could not be recorded succeeded")
	}
	if err := state.HealCheckpointWrites(r.State); err != nil {
		t.Fatal(err)
	}
	// The next durable answer flushes what memory holds.
	if err := r.State.Unprepare(ctx, "uid-nobody"); err != nil {
		t.Fatal(err)
	}
	if rec, ok := r.State.Claim(a.UID); !ok || rec.Phase != state.PhaseCompleted {
		t.Fatalf("record after the failed start: %+v, want the completed one", rec)
	}
	checkConsistent(t, r)
	prepareUntilDone(t, r.State, a, req, r.Devices(t))
	if got := afuID(t, r, dev); got != testnode.NewAFU {
		t.Fatalf("region carries %s after the retried prepare, want %s", got, testnode.NewAFU)
	}
	checkConsistent(t, r)
}

// TestUnprepareIfUnchanged: a release decided on evidence read after the
// holder's Version releases nothing when a prepare of the holder began, or
// one that was running ended, since that Version; otherwise it releases
// like Unprepare. Versions never come back while the holder is known.
func TestUnprepareIfUnchanged(t *testing.T) {
	ctx := context.Background()
	a := legacy("a")
	n, dev := preparedNode(t, a, nil)
	devs := n.Devices(t)
	kept := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, state.ErrChanged) || !strings.Contains(err.Error(), string(a.UID)) {
			t.Fatalf("%s: unprepare %v, want ErrChanged naming %s", what, err, a.UID)
		}
		if _, ok := n.State.Claim(a.UID); !ok || n.State.Holders()[dev] != a.UID {
			t.Fatalf("%s: %s released", what, a.UID)
		}
		checkConsistent(t, n)
	}

	v := n.State.Version(a.UID)
	if v == 0 {
		t.Fatal("a prepared holder has Version 0")
	}
	// Prepared again (a device plugin's Allocate for a new container),
	// answered from its record.
	if _, err := n.State.Prepare(ctx, a, request(dev, nil), devs); err != nil {
		t.Fatal(err)
	}
	v2 := n.State.Version(a.UID)
	if v2 == v {
		t.Fatal("Version unchanged by a prepare")
	}
	kept("prepared since", n.State.Unprepare(ctx, a.UID, state.IfUnchanged(v)))

	// A prepare running when the Version is read, ended before the release.
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n2 := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim, PrepareWait: time.Millisecond})
	devs2 := n2.Devices(t)
	b := holder("b")
	dev2 := devs2.Ports()[0].DeviceName()
	before := n2.State.Version(b.UID)
	if _, err := n2.State.Prepare(ctx, b, request(dev2, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs2); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare held at the gate: %v, want in progress", err)
	}
	<-started
	// Begun since, still running: neither released nor cancelled.
	if err := n2.State.Unprepare(ctx, b.UID, state.IfUnchanged(before)); !errors.Is(err, state.ErrChanged) {
		t.Fatalf("unprepare of a prepare begun since: %v, want ErrChanged", err)
	}
	running := n2.State.Version(b.UID)
	close(gate)
	prepareUntilDone(t, n2.State, b, request(dev2, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs2)
	if err := n2.State.Unprepare(ctx, b.UID, state.IfUnchanged(running)); !errors.Is(err, state.ErrChanged) {
		t.Fatalf("unprepare of a prepare that completed since: %v, want ErrChanged", err)
	}
	if rec, ok := n2.State.Claim(b.UID); !ok || rec.Phase != state.PhaseCompleted {
		t.Fatalf("record %+v (%v) after a refused release, want it completed", rec, ok)
	}

	// Unchanged: released, and the Version goes.
	if err := n.State.Unprepare(ctx, a.UID, state.IfUnchanged(v2)); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.State.Claim(a.UID); ok || n.State.Holders()[dev] != "" || n.State.Version(a.UID) != 0 {
		t.Fatalf("not released: record %v, holder %q, version %d", ok, n.State.Holders()[dev], n.State.Version(a.UID))
	}
	checkConsistent(t, n)
	// Prepared anew: a Version the old one never equals.
	if _, err := n.State.Prepare(ctx, a, request(dev, nil), devs); err != nil {
		t.Fatal(err)
	}
	if v3 := n.State.Version(a.UID); v3 == v || v3 == v2 || v3 == 0 {
		t.Fatalf("Version %d after a new prepare, was %d and %d", v3, v, v2)
	}
}

// TestConditionalReleaseOfAnAnsweringPrepare: a conditional release that
// begins while the holder's prepare is past its own look at releasing but
// not yet answered (its Version unchanged) makes that answer "still
// releasing": no caller is answered a hold the release then frees.
func TestConditionalReleaseOfAnAnsweringPrepare(t *testing.T) {
	ctx := context.Background()
	a := legacy("a")
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, ReleaseWait: 5 * time.Second, OnStep: func(s state.Step, uid types.UID) {
		if s == state.StepPrepared && uid == a.UID {
			once.Do(func() { close(reached); <-proceed })
		}
	}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	type answer struct {
		out state.Outcome
		err error
	}
	prepared := make(chan answer, 1)
	go func() {
		out, err := n.State.Prepare(ctx, a, request(dev, nil), devs)
		prepared <- answer{out, err}
	}()
	<-reached // recorded, spec written, not answered
	v := n.State.Version(a.UID)
	released := make(chan error, 1)
	go func() { released <- n.State.Unprepare(ctx, a.UID, state.IfUnchanged(v)) }()
	// Once the release has begun, a's prepares are refused.
	for {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		_, err := n.State.Prepare(pctx, a, request(dev, nil), devs)
		cancel()
		if errors.Is(err, state.ErrReleasing) {
			break
		}
	}
	close(proceed)
	p, errU := <-prepared, <-released
	_, held := n.State.Claim(a.UID)
	if errU != nil || !errors.Is(p.err, state.ErrReleasing) || len(p.out.Devices) > 0 || held {
		t.Fatalf("prepare answered %v with %d devices, conditional release %v, still held %v; want the prepare refused as releasing and the hold released", p.err, len(p.out.Devices), errU, held)
	}
	checkConsistent(t, n)
}

// TestVersionOfALateAnswer: the outcome of a programming prepare that ended
// while no caller waited, handed out to a later call, changes the Version:
// a release decided before that answer is refused.
func TestVersionOfALateAnswer(t *testing.T) {
	ctx := context.Background()
	gate := make(chan struct{})
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: &program.SimProgrammer{Gate: gate}, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	b := holder("b")
	req := request(devs.Ports()[0].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways))
	if _, err := n.State.Prepare(ctx, b, req, devs); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare held at the gate: %v, want in progress", err)
	}
	started := n.State.Version(b.UID)
	close(gate)
	// The operation's end changes the Version; its outcome is unread.
	v := started
	for v == started {
		runtime.Gosched()
		v = n.State.Version(b.UID)
	}
	out, err := n.State.Prepare(ctx, b, req, devs)
	if err != nil || len(out.Devices) == 0 {
		t.Fatalf("late answer: %+v, %v", out, err)
	}
	if err := n.State.Unprepare(ctx, b.UID, state.IfUnchanged(v)); !errors.Is(err, state.ErrChanged) {
		t.Fatalf("release decided before the answer: %v, want ErrChanged", err)
	}
}

// TestSupersededHolderLosesItsVersion: a holder superseded by another has
// nothing left, and its Version is zero again.
func TestSupersededHolderLosesItsVersion(t *testing.T) {
	a, b := legacy("a"), legacy("b")
	n, dev := preparedNode(t, a, nil)
	if _, err := n.State.Prepare(context.Background(), b, request(dev, nil), n.Devices(t), state.Supersede(isLegacy)); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.State.Claim(a.UID); ok {
		t.Fatal("a not superseded")
	}
	if v := n.State.Version(a.UID); v != 0 {
		t.Fatalf("superseded holder has Version %d, want 0", v)
	}
}

// TestFailedPrepareAnnouncesFreedDevices: a prepare that fails before its
// commit (its CDI spec cannot be written) frees the device it reserved, and
// Subscribe's listeners hear of it, as they do of a release: the legacy
// endpoint may have advertised the device unavailable meanwhile.
func TestFailedPrepareAnnouncesFreedDevices(t *testing.T) {
	n := testnode.New(t, testnode.Options{})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	heard := make(chan struct{}, 8)
	defer n.State.Subscribe(func() { heard <- struct{}{} })()
	// A file where the CDI spec directory was: no spec can be written.
	if err := os.RemoveAll(n.CDIDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.CDIDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(context.Background(), holder("a"), request(dev, nil), devs); err == nil {
		t.Fatal("prepare without a CDI spec directory succeeded")
	}
	if h, held := n.State.Holders()[dev]; held {
		t.Fatalf("%s is held by %s after the failed prepare", dev, h)
	}
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("the device the failed prepare freed was never announced")
	}
}
