package state_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestLoadedGivesWayToLaterDiscovery: what this process loaded into a
// region stands for discovery passes that began before the load ended;
// a pass that began after it and reads another AFU (the region was reset
// or programmed outside the driver) is believed.
func TestLoadedGivesWayToLaterDiscovery(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	ctx := context.Background()
	stale := n.Devices(t)
	dev := stale.Ports()[0].DeviceName()
	// prepareNever prepares holder name for NewAFU without programming,
	// on what devs says, and releases it again.
	prepareNever := func(name string, devs *discovery.Result) error {
		t.Helper()
		if _, err := n.State.Prepare(ctx, holder(name), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingNever)), devs); err != nil {
			return err
		}
		if err := n.State.Unprepare(ctx, holder(name).UID); err != nil {
			t.Fatal(err)
		}
		return nil
	}

	if _, err := n.State.Prepare(ctx, holder("loader"), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), stale); err != nil {
		t.Fatal(err)
	}
	if err := n.State.Unprepare(ctx, holder("loader").UID); err != nil {
		t.Fatal(err)
	}
	if err := prepareNever("stale", stale); err != nil {
		t.Fatalf("a pass from before the load does not show it, and the load must stand for it: %v", err)
	}
	if err := prepareNever("seen", n.Devices(t)); err != nil {
		t.Fatalf("a pass after the load shows it: %v", err)
	}
	if err := n.Sim.SetAFUID(n.Sim.Cards[0].Ports[0], simnode.DefaultAFUID); err != nil {
		t.Fatal(err)
	}
	if err := prepareNever("reset", n.Devices(t)); !errors.Is(err, state.ErrAFUNotLoaded) {
		t.Fatalf("after the region was reset outside the driver, a prepare that must not program got %v, want %v", err, state.ErrAFUNotLoaded)
	}
	checkConsistent(t, n)
}
