package state_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestProgrammedBeforeBinding: a prepare before binding programs the
// region and records the claim as Programmed without a CDI spec; the
// binder's retries program nothing more; the kubelet's prepare later
// writes only the CDI spec (even for programming: Always) and the
// completed record keeps what was loaded for the claim.
func TestProgrammedBeforeBinding(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a, b := holder("a"), holder("b")
	reqs := request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways))
	ctx := context.Background()

	out, err := n.State.Prepare(ctx, a, reqs, devs, state.BeforeBinding())
	if err != nil {
		t.Fatalf("prepare before binding: %v", err)
	}
	if len(out.Devices) != 0 {
		t.Fatalf("prepare before binding handed out devices %+v", out.Devices)
	}
	if len(out.Programmed) != 1 || out.Programmed[0].Err != nil || out.Programmed[0].SHA256 == "" || !strings.HasSuffix(out.Programmed[0].Bitstream, "accel.gbs") {
		t.Fatalf("programming reported %+v, want one successful load of accel.gbs with its digest", out.Programmed)
	}
	loaded := out.Programmed[0]
	rec, ok := n.State.Claim(a.UID)
	if !ok || rec.Phase != state.PhaseProgrammed {
		t.Fatalf("record %+v, want phase %s", rec, state.PhaseProgrammed)
	}
	if d := rec.Devices[0]; !d.Programmed || d.AFUID != testnode.NewAFU || d.Bitstream != loaded.Bitstream || d.SHA256 != loaded.SHA256 {
		t.Fatalf("record's device %+v, want it programmed with %s from %s (%s)", d, testnode.NewAFU, loaded.Bitstream, loaded.SHA256)
	}
	if got := afuID(t, n, dev); got != testnode.NewAFU {
		t.Fatalf("region carries %s, want %s", got, testnode.NewAFU)
	}
	checkConsistent(t, n) // no CDI spec for a Programmed record

	// The binder looks again (its claim changed): nothing is programmed.
	if out, err := n.State.Prepare(ctx, a, reqs, devs, state.BeforeBinding()); err != nil || len(out.Programmed) != 0 || len(out.Devices) != 0 {
		t.Fatalf("second prepare before binding: %+v, %v; want nothing done", out, err)
	}
	if _, err := n.State.Prepare(ctx, b, request(dev, nil), devs); !errors.Is(err, state.ErrDeviceHeld) || !strings.Contains(err.Error(), a.Name) {
		t.Fatalf("another claim for the programmed region: %v, want it refused naming %s", err, a.Name)
	}

	// The pod is bound: the kubelet prepares.
	out = prepareUntilDone(t, n.State, a, reqs, devs)
	if len(out.Devices) != 1 || len(out.Devices[0].CDIDeviceIDs) != 1 || len(out.Programmed) != 0 {
		t.Fatalf("kubelet's prepare: %+v, want one device with its CDI ID and no programming", out)
	}
	if calls := n.Programmer.TotalCalls(); calls != 1 {
		t.Fatalf("the region was programmed %d times, want once (before binding)", calls)
	}
	rec, _ = n.State.Claim(a.UID)
	if rec.Phase != state.PhaseCompleted {
		t.Fatalf("record phase %s after the kubelet's prepare, want %s", rec.Phase, state.PhaseCompleted)
	}
	if d := rec.Devices[0]; !d.Programmed || d.Bitstream != loaded.Bitstream || d.SHA256 != loaded.SHA256 || d.CDIDeviceID != out.Devices[0].CDIDeviceIDs[0] {
		t.Fatalf("completed record's device %+v lost what was loaded for the claim before binding (%s, %s)", d, loaded.Bitstream, loaded.SHA256)
	}
	checkConsistent(t, n)
	unprepareUntilDone(t, n.State, a.UID)
	if h := n.State.Holders(); len(h) != 0 {
		t.Fatalf("held after unprepare: %v", h)
	}
	checkConsistent(t, n)
}

// TestProgrammedBeforeBindingReleased: a claim deallocated before its pod
// was bound is unprepared from phase Programmed: the region is free for
// another claim and no CDI spec is left.
func TestProgrammedBeforeBindingReleased(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a, b := holder("a"), holder("b")
	if _, err := n.State.Prepare(context.Background(), a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingIfNeeded)), devs, state.BeforeBinding()); err != nil {
		t.Fatal(err)
	}
	unprepareUntilDone(t, n.State, a.UID)
	if _, ok := n.State.Claim(a.UID); ok {
		t.Fatal("record kept after unprepare")
	}
	checkConsistent(t, n)
	out := prepareUntilDone(t, n.State, b, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingIfNeeded)), devs)
	if len(out.Devices) != 1 {
		t.Fatalf("another claim after the release: %+v", out)
	}
}

// TestProgrammedBeforeBindingThenReboot: a reboot erases what was
// programmed before binding, whether it comes before or after the
// kubelet's prepare: the kubelet's next prepare programs the region again
// although sysfs (simulated) still shows the AFU.
func TestProgrammedBeforeBindingThenReboot(t *testing.T) {
	for _, preparedBefore := range []bool{false, true} {
		name := "reboot before the kubelet's prepare"
		if preparedBefore {
			name = "reboot after the kubelet's prepare"
		}
		t.Run(name, func(t *testing.T) {
			n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
			devs := n.Devices(t)
			dev := devs.Ports()[0].DeviceName()
			a := holder("a")
			reqs := request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingIfNeeded))
			if _, err := n.State.Prepare(context.Background(), a, reqs, devs, state.BeforeBinding()); err != nil {
				t.Fatal(err)
			}
			if preparedBefore {
				prepareUntilDone(t, n.State, a, reqs, devs)
			}
			if err := n.Sim.SetBootID("00000000-0000-4000-8000-000000000002"); err != nil {
				t.Fatal(err)
			}
			n2 := testnode.New(t, testnode.Options{Restart: n})
			out := prepareUntilDone(t, n2.State, a, reqs, n2.Devices(t))
			if len(out.Devices) != 1 {
				t.Fatalf("kubelet's prepare after a reboot: %+v", out)
			}
			if calls := n2.Programmer.TotalCalls(); calls != 1 {
				t.Fatalf("after a reboot the region %s was programmed %d times, want once again", dev, calls)
			}
			checkConsistent(t, n2)
		})
	}
}

// TestWaitIdle: WaitIdle does not report idle while a region is being
// programmed (its context ends first), and returns once the programming
// has ended and the region carries the new function.
func TestWaitIdle(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{
		Sim: simnode.Options{Cards: 1}, Programmer: sim, Backend: testnode.Stubborn{SimProgrammer: sim},
		PrepareWait: time.Millisecond,
	})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	ctx := context.Background()
	if err := n.State.WaitIdle(ctx); err != nil {
		t.Fatalf("idle node: %v", err)
	}
	if _, err := n.State.Prepare(ctx, holder("a"), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs, state.BeforeBinding()); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare with programming held at the gate: %v, want in progress", err)
	}
	<-started
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := n.State.WaitIdle(ended); err == nil || !strings.Contains(err.Error(), dev) {
		t.Fatalf("WaitIdle while %s is programmed and its context ended: %v, want an error naming the device", dev, err)
	}
	openGateWaitIdle(t, n, gate, dev)
}

// openGateWaitIdle opens the gate that holds dev's programming of
// testnode.NewAFU while WaitIdle waits, and checks that WaitIdle returns
// only once that programming ended.
func openGateWaitIdle(t *testing.T, n *testnode.Node, gate chan struct{}, dev string) {
	t.Helper()
	idle := make(chan error, 1)
	go func() { idle <- n.State.WaitIdle(context.Background()) }()
	close(gate)
	if err := <-idle; err != nil {
		t.Fatal(err)
	}
	if got := afuID(t, n, dev); got != testnode.NewAFU {
		t.Fatalf("WaitIdle returned while the region carried %s, not %s: the programming in flight was cut short or not waited for", got, testnode.NewAFU)
	}
}

// TestStopWaitsForProgramming: the State's context ending (SIGTERM: the
// old pod of a rolling update) does not cut short programming in flight
// on a backend that honours its context; WaitIdle waits for it and the
// region carries the new AFU. A job that would start after the end does
// not program, and says why.
func TestStopWaitsForProgramming(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}, Programmer: sim, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	dev, other := devs.Ports()[0].DeviceName(), devs.Ports()[1].DeviceName()
	ctx := context.Background()
	cfg := ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)
	if _, err := n.State.Prepare(ctx, holder("a"), request(dev, cfg), devs); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare with programming held at the gate: %v, want in progress", err)
	}
	<-started
	n.Stop()
	openGateWaitIdle(t, n, gate, dev)
	calls := sim.TotalCalls()
	_, err := n.State.Prepare(ctx, holder("b"), request(other, cfg), devs)
	for errors.Is(err, state.ErrInProgress) {
		_, err = n.State.Prepare(ctx, holder("b"), request(other, cfg), devs)
	}
	if err == nil || !strings.Contains(err.Error(), "stopping") || sim.TotalCalls() != calls {
		t.Fatalf("prepare after the stop: %v after %d more programming calls, want an error saying the driver is stopping and none", err, sim.TotalCalls()-calls)
	}
}

// TestCancelJobsStopsProgramming: once the stop's wait gave up,
// CancelJobs makes a backend that honours its context stop part way, so
// that WaitIdle returns before the process lets the next one in; the
// claim's record stays started, for the next process to program again.
func TestCancelJobsStopsProgramming(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	if _, err := n.State.Prepare(context.Background(), holder("a"), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare with programming held at the gate: %v, want in progress", err)
	}
	<-started
	n.Stop()
	n.State.CancelJobs(errors.New("--shutdown-wait passed"))
	stopped, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.State.WaitIdle(stopped); err != nil {
		t.Fatalf("WaitIdle after CancelJobs: %v", err)
	}
	if got := afuID(t, n, dev); got == testnode.NewAFU {
		t.Fatalf("the region carries %s: the cancelled programming went on", got)
	}
	if rec, ok := n.State.Claim(holder("a").UID); !ok || rec.Phase != state.PhaseStarted {
		t.Fatalf("record after the cancelled programming: %+v, want started", rec)
	}
}

// TestKubeletPrepareDuringProgrammingBeforeBinding: the kubelet's prepare
// of a claim whose programming before binding is still running does not
// take that programming's answer (no devices) for its own: it gets the
// claim's devices and CDI IDs once the programming ended, and the region
// is programmed once.
func TestKubeletPrepareDuringProgrammingBeforeBinding(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a := holder("a")
	reqs := request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingIfNeeded))
	ctx := context.Background()
	binder := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(ctx, a, reqs, devs, state.BeforeBinding())
		binder <- err
	}()
	<-started
	kubelet := make(chan state.Outcome, 1)
	go func() { kubelet <- prepareUntilDone(t, n.State, a, reqs, devs) }()
	close(gate)
	if err := <-binder; err != nil {
		t.Fatalf("prepare before binding: %v", err)
	}
	out := <-kubelet
	if len(out.Devices) != 1 || len(out.Devices[0].CDIDeviceIDs) != 1 {
		t.Fatalf("the kubelet's prepare during programming before binding answered %+v, want the device with its CDI ID", out)
	}
	if calls := sim.TotalCalls(); calls != 1 {
		t.Fatalf("programmed %d times, want once", calls)
	}
	if rec, _ := n.State.Claim(a.UID); rec.Phase != state.PhaseCompleted {
		t.Fatalf("record phase %s, want %s", rec.Phase, state.PhaseCompleted)
	}
	checkConsistent(t, n)
}

// TestProgrammedBeforeBindingAllocatedAgain: a claim allocated again,
// another device, after its programming before binding (the scheduler gave
// up on the first allocation) holds only its new device once that is
// programmed: the first is free.
func TestProgrammedBeforeBindingAllocatedAgain(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	dev0, dev1 := devs.Ports()[0].DeviceName(), devs.Ports()[1].DeviceName()
	a := holder("a")
	ctx := context.Background()
	for _, dev := range []string{dev0, dev1} {
		if _, err := n.State.Prepare(ctx, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingIfNeeded)), devs, state.BeforeBinding()); err != nil {
			t.Fatalf("prepare %s before binding: %v", dev, err)
		}
	}
	if holds := n.State.Holders(); len(holds) != 1 || holds[dev1] != a.UID {
		t.Fatalf("holds %v, want only %s for %s", holds, dev1, a.UID)
	}
	checkConsistent(t, n)
}

// TestProgramHeldOneJobPerRegion: the programming hook asked for another
// AFU while the region is being programmed for the same holder is refused
// as in progress, naming the AFU being loaded; the job that runs stays the
// one CancelJobs and a release stop.
func TestProgramHeldOneJobPerRegion(t *testing.T) {
	gate := make(chan struct{})
	defer close(gate)
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, Programmer: sim})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	ctx := context.Background()
	l1 := legacy("one")
	if _, err := n.State.Prepare(ctx, l1, request(dev, nil), devs, state.Supersede(isLegacy)); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := n.State.ProgramHeld(ctx, l1.UID, dev, simnode.DefaultInterfaceID, testnode.NewAFU, devs)
		first <- err
	}()
	<-started
	// Refused at once; the bound only keeps a second job, which would
	// wait for the first at the region's lock, from holding the test.
	second, cancelSecond := context.WithTimeout(ctx, 5*time.Second)
	defer cancelSecond()
	if _, err := n.State.ProgramHeld(second, l1.UID, dev, simnode.DefaultInterfaceID, testnode.SecondAFU, devs); !errors.Is(err, state.ErrInProgress) || !strings.Contains(err.Error(), testnode.NewAFU) {
		t.Fatalf("the hook for %s while %s is being loaded: %v, want in progress naming %s", testnode.SecondAFU, testnode.NewAFU, err, testnode.NewAFU)
	}
	n.State.CancelJobs(errors.New("--shutdown-wait passed"))
	stopped, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.State.WaitIdle(stopped); err != nil {
		t.Fatalf("WaitIdle after CancelJobs: %v", err)
	}
	if err := <-first; err == nil {
		t.Fatal("the cancelled programming succeeded")
	}
}

// TestDrainTakesNoMoreWork: once a stopping daemon drains its State, a
// prepare, an unprepare and a programming of a held port that begin
// afterwards change nothing and fail with ErrDraining (the caller's retry
// reaches the next instance), while the programming that began before
// runs on and WaitIdle waits for it: nothing is written once WaitIdle has
// returned and the next instance may take over.
func TestDrainTakesNoMoreWork(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 3}, Programmer: sim, PrepareWait: time.Millisecond})
	devs := n.Devices(t)
	ports := devs.Ports()
	ctx := context.Background()
	held := holder("held")
	if _, err := n.State.Prepare(ctx, held, request(ports[2].DeviceName(), nil), devs); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(ctx, holder("a"), request(ports[0].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs, state.BeforeBinding()); !errors.Is(err, state.ErrInProgress) {
		t.Fatalf("prepare with programming held at the gate: %v, want in progress", err)
	}
	<-started
	before := n.State.Records()
	n.State.Drain()
	if _, err := n.State.Prepare(ctx, holder("b"), request(ports[1].DeviceName(), nil), devs); !errors.Is(err, state.ErrDraining) {
		t.Errorf("prepare while draining: %v, want ErrDraining", err)
	}
	if err := n.State.Unprepare(ctx, held.UID); !errors.Is(err, state.ErrDraining) {
		t.Errorf("unprepare while draining: %v, want ErrDraining", err)
	}
	if _, err := n.State.ProgramHeld(ctx, held.UID, ports[2].DeviceName(), simnode.DefaultInterfaceID, testnode.NewAFU, devs); !errors.Is(err, state.ErrDraining) {
		t.Errorf("programming a held port while draining: %v, want ErrDraining", err)
	}
	if h := n.State.Holders(); h[ports[1].DeviceName()] != "" || h[ports[2].DeviceName()] != held.UID {
		t.Errorf("holders after the refused calls: %v", h)
	}
	if got := n.State.Records(); len(got) != len(before) {
		t.Errorf("records changed while draining: %d, then %d", len(before), len(got))
	}
	openGateWaitIdle(t, n, gate, ports[0].DeviceName())
	if calls := sim.Calls(ports[2]); calls != 0 {
		t.Errorf("the held port was programmed %d times while draining", calls)
	}
}
