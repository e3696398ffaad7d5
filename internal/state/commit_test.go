package state_test

import (
	"context"
	"maps"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// holdFirstFlush makes n's first checkpoint flush wait: flushing is closed
// when it starts, and it goes on once release is closed.
func holdFirstFlush(n *testnode.Node) (flushing, release chan struct{}) {
	flushing, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	state.SetOnFlush(n.State, func() {
		once.Do(func() { close(flushing); <-release })
	})
	return flushing, release
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
