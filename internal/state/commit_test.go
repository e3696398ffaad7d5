package state_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

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

// TestFlushWaitsForExpectedClaimsOnAFastDisk: how long a flush waits for
// claims it expects is not bounded by the flush time: on a disk that
// flushes in a nanosecond, the claims of one kubelet call, the second
// reaching the State only once the first's flush waits, still share it.
func TestFlushWaitsForExpectedClaimsOnAFastDisk(t *testing.T) {
	n, devs, gathering := flushingNode(t, 2, nil)
	state.SetGather(n.State, time.Nanosecond, gatherBound, func() { gathering <- struct{}{} })
	ctx, end := n.State.Expect(context.Background(), 2)
	defer end()
	before := n.State.CheckpointSyncs()
	first := prepareAsync(ctx, n, holder("a"), request(devs.Ports()[0].DeviceName(), nil), devs)
	await(t, gathering, "the first claim's flush to wait for the second")
	second := prepareAsync(ctx, n, holder("b"), request(devs.Ports()[1].DeviceName(), nil), devs)
	awaitPrepares(t, "the call's prepares", first, second)
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Fatalf("the call's two prepares flushed %d times, want once", got)
	}
	checkConsistent(t, n)
}

// TestSkipSyncNeverGathers: without a disk flush there is nothing for
// a change to share, so no write waits for another, expected or not
// (SkipSync measures what the flush costs; a gather wait there is cost
// the flush does not have).
func TestSkipSyncNeverGathers(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}, SkipSync: true})
	devs := n.Devices(t)
	gathering := make(chan struct{}, 64)
	state.SetGather(n.State, 0, gatherBound, func() { gathering <- struct{}{} })
	ctx, end := n.State.Expect(context.Background(), 2)
	defer end()
	prepareAtOnce(t, ctx, n, gathering, holder("a"), devs.Ports()[0].DeviceName(), devs)
}

// awaitPrepares fails the test unless each of dones (prepareAsync) ends
// without error within guard; what names them.
func awaitPrepares(t *testing.T, what string, dones ...<-chan error) {
	t.Helper()
	for _, done := range dones {
		if err := await(t, done, what); err != nil {
			t.Fatal(err)
		}
	}
}

// prepareAsync prepares h in another goroutine; the channel gets its
// error.
func prepareAsync(ctx context.Context, n *testnode.Node, h state.Holder, reqs []state.DeviceRequest, devs *discovery.Result) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := n.State.Prepare(ctx, h, reqs, devs)
		done <- err
	}()
	return done
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

	programmed := prepareAsync(context.Background(), n, holder("programming"), request(ports[2].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs)
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
	done := prepareAsync(ctx, n, holder("a"), request(devs.Ports()[0].DeviceName(), nil), devs)
	await(t, gathering, "the flush to wait for the call's other claims")
	end()
	if err := await(t, done, "the prepare once its call ended"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, n)
}

// TestFlushAfterOneCallIsImmediate: many claims of one kubelet call that
// shared a flush are no stream of calls; a lone unprepare right after
// flushes at once.
func TestFlushAfterOneCallIsImmediate(t *testing.T) {
	n, devs, gathering := flushingNode(t, 4, nil)
	state.SetStreamGap(n.State, gatherBound)
	ctx, end := n.State.Expect(context.Background(), len(devs.Ports()))
	before := n.State.CheckpointSyncs()
	prepareAll(t, ctx, n, devs)
	end()
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Fatalf("the call's %d prepares flushed %d times, want once", len(devs.Ports()), got)
	}
	drain(gathering)
	atOnce(t, gathering, "unprepare 0", func() error { return n.State.Unprepare(context.Background(), holder("0").UID) })
	checkConsistent(t, n)
}

// twoCallsShareFlush prepares holders "a" and "b" on the first two ports,
// each in a kubelet call of its own, sharing one flush; it empties
// gathering.
func twoCallsShareFlush(t *testing.T, n *testnode.Node, devs *discovery.Result, gathering chan struct{}) {
	t.Helper()
	before := n.State.CheckpointSyncs()
	var dones []<-chan error
	var ctxs []context.Context
	var ends []func()
	// Both calls arrive before either prepares (a prepare started before
	// the other call is announced may flush alone). The caller that takes
	// the flush first may have found the other in sync already: it then
	// waits its whole bound for more calls of the burst, so the bound is
	// finite here, and long enough for the other prepare to reach the
	// checkpoint on a loaded machine.
	state.SetGatherBound(n.State, 2*time.Second)
	defer state.SetGatherBound(n.State, gatherBound)
	for range 2 {
		ctx, end := n.State.Expect(context.Background(), 1)
		ctxs, ends = append(ctxs, ctx), append(ends, end)
	}
	for i, name := range []string{"a", "b"} {
		dones = append(dones, prepareAsync(ctxs[i], n, holder(name), request(devs.Ports()[i].DeviceName(), nil), devs))
	}
	awaitPrepares(t, "the two calls' prepares", dones...)
	for _, end := range ends {
		end()
	}
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Fatalf("two calls' prepares flushed %d times, want once", got)
	}
	drain(gathering)
}

// TestFlushWaitsWhileCallsStream: after a flush that two kubelet calls
// shared, the next caller waits for more, unannounced as they are.
func TestFlushWaitsWhileCallsStream(t *testing.T) {
	n, devs, gathering := flushingNode(t, 3, nil)
	state.SetStreamGap(n.State, gatherBound)
	twoCallsShareFlush(t, n, devs, gathering)
	state.SetGatherBound(n.State, time.Millisecond) // the wait ends on its timer
	done := prepareAsync(context.Background(), n, holder("c"), request(devs.Ports()[2].DeviceName(), nil), devs)
	await(t, gathering, "the flush after two calls to wait for more")
	if err := await(t, done, "the prepare after its wait"); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, n)
}

// TestFlushAfterStreamEndedIsImmediate: once the flush two calls shared
// is older than the stream gap, the next caller flushes at once.
func TestFlushAfterStreamEndedIsImmediate(t *testing.T) {
	n, devs, gathering := flushingNode(t, 3, nil)
	state.SetStreamGap(n.State, gatherBound)
	twoCallsShareFlush(t, n, devs, gathering)
	state.AgeLastFlush(n.State, 2*gatherBound)
	prepareAtOnce(t, context.Background(), n, gathering, holder("c"), devs.Ports()[2].DeviceName(), devs)
	checkConsistent(t, n)
}

// holdFirstFlush makes n's first flush, once it has taken its snapshot,
// close flushing and wait until release is closed; later flushes run on.
func holdFirstFlush(n *testnode.Node) (flushing, release chan struct{}) {
	flushing, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	state.SetOnFlush(n.State, func() {
		once.Do(func() { close(flushing); <-release })
	})
	return flushing, release
}

// awaitWaiting fails the test unless want callers wait for n's checkpoint
// to reach the disk within guard; what names the last of them.
func awaitWaiting(t *testing.T, n *testnode.Node, want int32, what string) {
	t.Helper()
	for deadline := time.Now().Add(guard); state.Waiting(n.State) < want; runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach the checkpoint within %s", what, guard)
		}
	}
}

// drain empties ch.
func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestFlushWaitsWhenQueued: a caller that finds another flushing before
// it is one of several arriving together, and waits for more before its
// own flush.
func TestFlushWaitsWhenQueued(t *testing.T) {
	n, devs, gathering := flushingNode(t, 2, nil)
	state.SetGather(n.State, time.Millisecond, time.Millisecond, func() { gathering <- struct{}{} })
	flushing, release := holdFirstFlush(n)
	first := prepareAsync(context.Background(), n, holder("first"), request(devs.Ports()[0].DeviceName(), nil), devs)
	await(t, flushing, "the first flush")
	queued := prepareAsync(context.Background(), n, holder("queued"), request(devs.Ports()[1].DeviceName(), nil), devs)
	awaitWaiting(t, n, 2, "the second prepare") // in sync, behind the first flush
	select {
	case <-gathering:
		t.Fatal("the first flush, alone, waited")
	default:
	}
	close(release)
	await(t, gathering, "the queued caller's flush to wait for more")
	awaitPrepares(t, "the prepares", first, queued)
	checkConsistent(t, n)
}

// TestFailedFlushIsNeverAnswered: a flush that fails answers its callers
// with the error, and what memory then holds but the disk may not (a
// completed record, a record removed) is never the answer to a call the
// kubelet retries until a flush has put it on the disk: a crash never
// loses what the kubelet was told.
func TestFailedFlushIsNeverAnswered(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	ports := devs.Ports()
	a, b := holder("a"), holder("b")
	ctx := context.Background()
	if _, err := n.State.Prepare(ctx, b, request(ports[1].DeviceName(), nil), devs); err != nil {
		t.Fatal(err)
	}

	state.BreakCheckpointWrites(n.State)
	for try := range 2 {
		if _, err := n.State.Prepare(ctx, a, request(ports[0].DeviceName(), nil), devs); err == nil {
			t.Errorf("prepare %d of %s answered while no checkpoint write succeeds", try+1, a.UID)
		}
		if err := n.State.Unprepare(ctx, b.UID); err == nil {
			t.Errorf("unprepare %d of %s answered while no checkpoint write succeeds", try+1, b.UID)
		}
	}

	if err := state.HealCheckpointWrites(n.State); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(ctx, a, request(ports[0].DeviceName(), nil), devs); err != nil {
		t.Fatalf("prepare of %s once writes work again: %v", a.UID, err)
	}
	if err := n.State.Unprepare(ctx, b.UID); err != nil {
		t.Fatalf("unprepare of %s once writes work again: %v", b.UID, err)
	}
	checkConsistent(t, n)
	if got := n.State.Holders(); !maps.Equal(got, map[string]types.UID{ports[0].DeviceName(): a.UID}) {
		t.Errorf("holders %v, want only %s on %s", got, a.UID, ports[0].DeviceName())
	}
}

// TestProgramHeldIsDurable: the legacy endpoint's programming hook hears
// of success only once the record of what the region holds is on the
// disk, also when the AFU was loaded and recorded by an earlier call.
func TestProgramHeldIsDurable(t *testing.T) {
	l := legacy("one")
	n, dev := preparedNode(t, l, nil, state.Supersede(isLegacy))
	ctx := context.Background()
	state.BreakCheckpointWrites(n.State)
	for try := range 2 {
		if _, err := n.State.ProgramHeld(ctx, l.UID, dev, simnode.DefaultInterfaceID, testnode.NewAFU, n.Devices(t)); err == nil {
			t.Errorf("programming hook call %d answered while no checkpoint write succeeds", try+1)
		}
	}
	if err := state.HealCheckpointWrites(n.State); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.ProgramHeld(ctx, l.UID, dev, simnode.DefaultInterfaceID, testnode.NewAFU, n.Devices(t)); err != nil {
		t.Fatalf("programming hook once writes work again: %v", err)
	}
	r := testnode.New(t, testnode.Options{Restart: n})
	if rec, ok := r.State.Claim(l.UID); !ok || rec.Devices[0].AFUID != testnode.NewAFU {
		t.Errorf("record of %s after a restart: %+v, want AFU %s", l.UID, rec, testnode.NewAFU)
	}
}

// TestWaitIdleWaitsForAFlush: a checkpoint flush in flight outside any
// operation (an unprepare of an unknown claim making earlier changes
// durable, after a flush failed) keeps WaitIdle from reporting idle: the
// next instance must not take the node over while this one writes the
// checkpoint file.
func TestWaitIdleWaitsForAFlush(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	ctx := context.Background()
	state.BreakCheckpointWrites(n.State)
	if _, err := n.State.Prepare(ctx, holder("a"), request(devs.Ports()[0].DeviceName(), nil), devs); err == nil {
		t.Fatal("prepare answered while no checkpoint write succeeds")
	}
	if err := state.HealCheckpointWrites(n.State); err != nil {
		t.Fatal(err)
	}
	flushing, release := holdFirstFlush(n)
	unprepared := make(chan error, 1)
	go func() { unprepared <- n.State.Unprepare(ctx, holder("x").UID) }()
	<-flushing
	n.State.Drain()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	err := n.State.WaitIdle(ended)
	close(release)
	if err == nil {
		t.Error("WaitIdle reported idle while the checkpoint was being written")
	}
	if err := <-unprepared; err != nil {
		t.Fatalf("unprepare of an unknown claim: %v", err)
	}
	if err := n.State.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle once the flush ended: %v", err)
	}
}

// TestWaitIdleEndedWithNothingRunning: a stop whose wait bound has passed
// (or is zero) while nothing runs and no checkpoint flush holds the
// journal is idle: WaitIdle must not report a flush still running, which
// makes the daemon log a false error and cancel programming.
func TestWaitIdleEndedWithNothingRunning(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	n.State.Drain()
	for i := range 20 {
		if err := n.State.WaitIdle(ended); err != nil {
			t.Fatalf("WaitIdle %d with nothing running: %v", i, err)
		}
	}
}

// TestChangeAfterSnapshotWaitsForNextFlush: a change made after a flush
// took its snapshot is not answered by that flush's end but by a flush
// that writes it: when its prepare returns, its record is on the disk.
func TestChangeAfterSnapshotWaitsForNextFlush(t *testing.T) {
	n, devs, _ := flushingNode(t, 2, nil)
	// The late caller, queued behind a flush, waits for more: briefly.
	state.SetGather(n.State, time.Millisecond, time.Millisecond, nil)
	flushing, release := holdFirstFlush(n)
	before := n.State.CheckpointSyncs()
	first := prepareAsync(context.Background(), n, holder("first"), request(devs.Ports()[0].DeviceName(), nil), devs)
	await(t, flushing, "the first flush")
	late := prepareAsync(context.Background(), n, holder("late"), request(devs.Ports()[1].DeviceName(), nil), devs)
	awaitWaiting(t, n, 2, "the late prepare")
	close(release)
	awaitPrepares(t, "the prepares", first, late)
	checkConsistent(t, n) // the late record is on the disk
	if got := n.State.CheckpointSyncs() - before; got != 2 {
		t.Errorf("%d flushes, want 2: the late change missed the first", got)
	}
}

// TestStreamGuessEndsWhenCallsAreBack: after a flush two calls shared, the
// next flush's wait for more calls ends once two calls wait again, rather
// than on its timer: a node's callers sending claim after claim are all
// back then.
func TestStreamGuessEndsWhenCallsAreBack(t *testing.T) {
	n, devs, gathering := flushingNode(t, 4, nil)
	state.SetStreamGap(n.State, gatherBound)
	twoCallsShareFlush(t, n, devs, gathering)
	before := n.State.CheckpointSyncs()
	var dones []<-chan error
	for i, name := range []string{"c", "d"} {
		dones = append(dones, prepareAsync(context.Background(), n, holder(name), request(devs.Ports()[2+i].DeviceName(), nil), devs))
	}
	awaitPrepares(t, "the two prepares after a stream", dones...)
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Errorf("the two prepares flushed %d times, want once", got)
	}
	checkConsistent(t, n)
}

// TestMeanwhileRunsWhileTheRecordIsFlushed: a prepare that records its
// holder's devices itself runs the caller's Meanwhile work once, in the
// calling goroutine, with the outcome Prepare then returns, before its
// flush has ended (the flush is counted when it ends); a prepare answered
// from the holder's record, one refused and one that programs run none.
func TestMeanwhileRunsWhileTheRecordIsFlushed(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}, Programmer: &program.SimProgrammer{}})
	devs := n.Devices(t)
	ctx := context.Background()
	ports := devs.Ports()
	var ran []state.Outcome
	var flushesThen []uint64
	meanwhile := state.Meanwhile(func(out state.Outcome) {
		ran = append(ran, out)
		flushesThen = append(flushesThen, n.State.CheckpointSyncs())
	})
	before := n.State.CheckpointSyncs()
	out, err := n.State.Prepare(ctx, holder("a"), request(ports[0].DeviceName(), nil), devs, meanwhile)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case len(ran) != 1:
		t.Fatalf("a prepare that recorded its claim ran the meanwhile work %d times, want once", len(ran))
	case !reflect.DeepEqual(ran[0].Devices, out.Devices) || len(out.Devices) != 1:
		t.Fatalf("the meanwhile work saw devices %+v, Prepare returned %+v", ran[0].Devices, out.Devices)
	case flushesThen[0] != before:
		t.Fatalf("the meanwhile work ran after the prepare's flush ended (%d flushes then, %d before the prepare)", flushesThen[0], before)
	case n.State.CheckpointSyncs() != before+1:
		t.Fatalf("the prepare flushed %d times, want once", n.State.CheckpointSyncs()-before)
	}
	if _, err := n.State.Prepare(ctx, holder("a"), request(ports[0].DeviceName(), nil), devs, meanwhile); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(ctx, holder("b"), request(ports[0].DeviceName(), nil), devs, meanwhile); !errors.Is(err, state.ErrDeviceHeld) {
		t.Fatalf("a prepare of a held device: got %v, want ErrDeviceHeld", err)
	}
	if _, err := n.State.Prepare(ctx, holder("c"), request(ports[1].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs, meanwhile); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 1 {
		t.Fatalf("prepares answered from a record, refused or programming ran the meanwhile work: %d runs in all, want 1", len(ran))
	}
	checkConsistent(t, n)
}

// TestAFlushEndsBeforeTheSpecWrittenBesideIt: a prepare that found
// another caller flushing writes its CDI spec in another goroutine; the
// flush it then leads alone ends in startSync, not once that spec is
// written: another claim's prepare meanwhile waits at most the gather
// bound, not for the spec.
func TestAFlushEndsBeforeTheSpecWrittenBesideIt(t *testing.T) {
	a, b := holder("a"), holder("b")
	at := map[types.UID]chan struct{}{a.UID: make(chan struct{}), b.UID: make(chan struct{})}
	release := map[types.UID]chan struct{}{a.UID: make(chan struct{}), b.UID: make(chan struct{})}
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 3}, OnStep: func(step state.Step, uid types.UID) {
		if step == state.StepSpecWritten && at[uid] != nil {
			close(at[uid])
			<-release[uid]
		}
	}})
	state.SetGather(n.State, 0, time.Millisecond, nil)
	flushing := make(chan struct{}, 8)
	state.SetOnFlush(n.State, func() { flushing <- struct{}{} })
	devs := n.Devices(t)
	ports := devs.Ports()
	prepare := func(h state.Holder, port int) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := n.State.Prepare(context.Background(), h, request(ports[port].DeviceName(), nil), devs)
			done <- err
		}()
		return done
	}
	// b flushes alone, its flight open while it writes its spec: a
	// finds it in sync and writes its spec in another goroutine.
	doneB := prepare(b, 0)
	<-at[b.UID]
	<-flushing // b's
	doneA := prepare(a, 1)
	<-at[a.UID]
	close(release[b.UID])
	// a leads the next flush alone (b left) while its spec is unwritten.
	<-flushing // a's
	doneC := prepare(holder("c"), 2)
	releaseA := sync.OnceFunc(func() { close(release[a.UID]) })
	select {
	case err := <-doneC:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(guard):
		t.Errorf("a prepare of another claim waited for claim a's CDI spec write: the flush a led stayed open")
		releaseA()
		<-doneC
	}
	releaseA()
	awaitPrepares(t, "the prepares", doneA, doneB)
	checkConsistent(t, n)
}

// TestMeanwhileNotAfterASharedFlush: a prepare that found nobody in sync
// but whose flush gathered another claim of its kubelet call flushes with
// it before startSync returns; its Meanwhile work does not run then (the
// flush has ended: it would only delay the prepare's end).
func TestMeanwhileNotAfterASharedFlush(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	ports := devs.Ports()
	ctx, end := n.State.Expect(context.Background(), 2)
	defer end()
	other := make(chan error, 1)
	state.SetGather(n.State, 0, gatherBound, sync.OnceFunc(func() {
		go func() {
			_, err := n.State.Prepare(ctx, holder("b"), request(ports[1].DeviceName(), nil), devs)
			other <- err
		}()
	}))
	before := n.State.CheckpointSyncs()
	var flushesThen []uint64
	meanwhile := state.Meanwhile(func(state.Outcome) { flushesThen = append(flushesThen, n.State.CheckpointSyncs()) })
	if _, err := n.State.Prepare(ctx, holder("a"), request(ports[0].DeviceName(), nil), devs, meanwhile); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	for _, then := range flushesThen {
		if then != before {
			t.Errorf("the meanwhile work ran after the prepare's flush ended (%d flushes then, %d before the prepare)", then, before)
		}
	}
	if got := n.State.CheckpointSyncs() - before; got != 1 {
		t.Errorf("the two prepares flushed %d times, want once", got)
	}
	checkConsistent(t, n)
}
