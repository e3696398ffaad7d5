package state_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// gatherBound is the flush wait in these tests: far longer than any test
// may take, so that a flush that must wait never stops early on its timer
// (a flush that waits wrongly fails the test after guard; the node's end
// then ends the wait).
const gatherBound = time.Hour

// guard is how long a step may take before the test calls it stuck.
const guard = time.Minute

// flushingNode is a node whose checkpoint is flushed (SkipSync off), with
// flushes set to wait up to gatherBound; gathering receives a value each
// time a flush starts waiting.
func flushingNode(t *testing.T, cards int, sim *program.SimProgrammer) (*testnode.Node, *discovery.Result, chan struct{}) {
	t.Helper()
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: cards}, Programmer: sim})
	gathering := make(chan struct{}, 64)
	state.SetGather(n.State, gatherBound, gatherBound, func() { gathering <- struct{}{} })
	return n, n.Devices(t), gathering
}

// await fails the test unless ch is ready within guard.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("%s: not within %s", what, guard)
		panic("unreachable")
	}
}

// prepareAll prepares holder i on device i for every device, concurrently
// with ctx, and fails on any error.
func prepareAll(t *testing.T, ctx context.Context, n *testnode.Node, devs *discovery.Result) {
	t.Helper()
	errs := make(chan error, len(devs.Ports()))
	var wg sync.WaitGroup
	for i, p := range devs.Ports() {
		wg.Go(func() {
			_, err := n.State.Prepare(ctx, holder(fmt.Sprint(i)), request(p.DeviceName(), nil), devs)
			errs <- err
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	await(t, done, "the prepares")
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFlushWaitsForAnnouncedClaims: a kubelet call's claims, announced as
// the call arrives, share one flush however their prepares interleave.
func TestFlushWaitsForAnnouncedClaims(t *testing.T) {
	n, devs, _ := flushingNode(t, 4, nil)
	ctx, end := n.State.Expect(context.Background(), len(devs.Ports()))
	defer end()
	before := n.State.CheckpointSyncs()
	prepareAll(t, ctx, n, devs)
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Fatalf("%d prepares of one call flushed the checkpoint %d times, want once", len(devs.Ports()), got)
	}
	checkConsistent(t, n)
}

// atOnce runs f and fails the test if a flush waits for anything meanwhile.
func atOnce(t *testing.T, gathering <-chan struct{}, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-gathering:
		t.Fatalf("%s: a flush waited with nothing to wait for", what)
	}
}

// prepareAtOnce prepares h on device with ctx (atOnce).
func prepareAtOnce(t *testing.T, ctx context.Context, n *testnode.Node, gathering <-chan struct{}, h state.Holder, device string, devs *discovery.Result) {
	t.Helper()
	atOnce(t, gathering, "prepare "+h.Name, func() error {
		_, err := n.State.Prepare(ctx, h, request(device, nil), devs)
		return err
	})
}

// TestFlushAloneIsImmediate: a prepare with nothing else expected flushes
// at once, announced or not, and so does one while another claim's
// region is programming (its commit is seconds away).
func TestFlushAloneIsImmediate(t *testing.T) {
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	n, devs, gathering := flushingNode(t, 3, sim)
	ports := devs.Ports()

	prepareAtOnce(t, context.Background(), n, gathering, holder("plain"), ports[0].DeviceName(), devs)
	ctx, end := n.State.Expect(context.Background(), 1)
	defer end()
	prepareAtOnce(t, ctx, n, gathering, holder("announced"), ports[1].DeviceName(), devs)

	programmed := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(context.Background(), holder("programming"), request(ports[2].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs)
		programmed <- err
	}()
	await(t, started, "programming to start")
	atOnce(t, gathering, "unprepare plain", func() error { return n.State.Unprepare(context.Background(), holder("plain").UID) })
	prepareAtOnce(t, context.Background(), n, gathering, holder("beside"), ports[0].DeviceName(), devs)
	close(gate)
	if err := await(t, programmed, "the programming prepare"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, n)
}

// TestFlushWaitEndsWhenCallEnds: a flush waiting for a call's announced
// claims stops waiting when the call ends without them (a claim refused
// before it reached the State).
func TestFlushWaitEndsWhenCallEnds(t *testing.T) {
	n, devs, gathering := flushingNode(t, 1, nil)
	ctx, end := n.State.Expect(context.Background(), 3)
	done := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(ctx, holder("a"), request(devs.Ports()[0].DeviceName(), nil), devs)
		done <- err
	}()
	await(t, gathering, "the flush to wait for the call's other claims")
	end()
	if err := await(t, done, "the prepare once its call ended"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, n)
}
