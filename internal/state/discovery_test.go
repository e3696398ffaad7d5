package state_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

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

// TestStuckCardLeavesOthersFresh: while a read of one card is stuck, the
// passes still read the others afresh: a region of another card reset
// outside the driver after this process loaded it is believed, as
// TestLoadedGivesWayToLaterDiscovery shows without a stuck card.
func TestStuckCardLeavesOthersFresh(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	n.Scanner.ReadTimeout = 50 * time.Millisecond
	ctx := context.Background()
	res := n.Devices(t)
	dev := res.Cards[0].Ports[0].DeviceName()
	release, err := simnode.Wedge(filepath.Join(n.Sim.Cards[1].Ports[0].SysfsPath, "afu_id"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = release() })
	if res, _ = n.Scanner.Refresh(res); res.Cards[1].Ports[0].Health.Healthy {
		t.Fatalf("card 1 is not stuck: %v", res.Cards[1].Ports[0].Health)
	}

	if _, err := n.State.Prepare(ctx, holder("loader"), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), res); err != nil {
		t.Fatal(err)
	}
	if err := n.State.Unprepare(ctx, holder("loader").UID); err != nil {
		t.Fatal(err)
	}
	if err := n.Sim.SetAFUID(n.Sim.Cards[0].Ports[0], simnode.DefaultAFUID); err != nil {
		t.Fatal(err)
	}
	later, _ := n.Scanner.Refresh(res)
	if h := later.Cards[1].Ports[0].Health; h.Healthy {
		t.Fatalf("card 1 is no longer stuck: %v", h)
	}
	if _, err := n.State.Prepare(ctx, holder("reset"), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingNever)), later); !errors.Is(err, state.ErrAFUNotLoaded) {
		t.Fatalf("card 0 was reset outside the driver and read again since, while card 1 is stuck: a prepare that must not program got %v, want %v", err, state.ErrAFUNotLoaded)
	}
	checkConsistent(t, n)
}
