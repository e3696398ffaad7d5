package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// racingNode is a one-port node whose State reports a violation when a
// region finishes programming for a holder that no longer holds it.
type racingNode struct {
	*testnode.Node
	dev        string
	devs       *discovery.Result
	violations atomic.Int64
	lastBad    atomic.Value
}

func newRacingNode(t *testing.T) *racingNode {
	r := &racingNode{}
	r.Node = testnode.New(t, testnode.Options{
		Sim:        simnode.Options{Cards: 1},
		MemoryDisk: true, // the races are about the lock, not the disk
		OnStep: func(step state.Step, h types.UID) {
			if step != state.StepProgrammed {
				return
			}
			if got := r.State.Holders()[r.dev]; got != h {
				r.violations.Add(1)
				r.lastBad.Store(fmt.Sprintf("programmed for %s while %q holds the region", h, got))
			}
		},
	})
	r.devs = r.Devices(t)
	r.dev = r.devs.Ports()[0].DeviceName()
	return r
}

// release unprepares every holder, so the next round starts free, and
// checks that each holder the races use can be prepared again.
func (r *racingNode) release(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, uid := range r.State.Holders() {
		if err := r.State.Unprepare(ctx, uid); err != nil {
			t.Fatalf("release %s: %v", uid, err)
		}
	}
	if h := r.State.Holders(); len(h) != 0 {
		t.Fatalf("still held after release: %v", h)
	}
	for _, h := range []state.Holder{holder("a"), holder("b"), legacy("one"), legacy("two")} {
		if _, err := r.State.Prepare(ctx, h, request(r.dev, nil), r.devs); err != nil {
			t.Fatalf("%s, released, cannot be prepared again: %v", h.UID, err)
		}
		if err := r.State.Unprepare(ctx, h.UID); err != nil {
			t.Fatalf("release %s: %v", h.UID, err)
		}
	}
}

// race runs a and b at once and returns their errors.
func race(a, b func() error) (errA, errB error) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); <-start; errA = a() }()
	go func() { defer wg.Done(); <-start; errB = b() }()
	close(start)
	wg.Wait()
	return errA, errB
}

// oneWinner checks that exactly one of two prepares won the device and the
// other was refused naming the winner.
func oneWinner(t *testing.T, r *racingNode, a, b state.Holder, errA, errB error) {
	t.Helper()
	winner, loserErr := a, errB
	switch {
	case errA == nil && errB == nil:
		t.Fatalf("both %s and %s prepared device %s", a.Name, b.Name, r.dev)
	case errA != nil && errB != nil:
		t.Fatalf("neither prepared: %v / %v", errA, errB)
	case errA != nil:
		winner, loserErr = b, errA
	}
	if !errors.Is(loserErr, state.ErrDeviceHeld) || !strings.Contains(loserErr.Error(), winner.Name) {
		t.Fatalf("loser's error %v, want ErrDeviceHeld naming %s", loserErr, winner.Name)
	}
	if got := r.State.Holders()[r.dev]; got != winner.UID {
		t.Fatalf("device held by %q, want the winner %s", got, winner.UID)
	}
}

// rounds is how often each race runs: thousands in all under -race.
func rounds(t *testing.T, n int) int {
	if testing.Short() {
		return n / 10
	}
	return n
}

// TestRaceEntryPoints races every pair of the State's entry points that
// can meet on one device, many times, and checks after each round that one
// holder won where one must, that the state, the CDI specs and the
// checkpoint on disk agree, and that no region finished programming for a
// holder that had lost it.
func TestRaceEntryPoints(t *testing.T) {
	f := newRacers()
	for _, tc := range slices.Concat(f.claimRaces(), f.legacyRaces(), f.releaseRaces(), f.hookRaces()) {
		t.Run(tc.name, func(t *testing.T) { runRace(t, tc) })
	}
}

// raceCase is one race: setup runs before each round, run races two entry
// points and check judges their errors.
type raceCase struct {
	name   string
	rounds int
	setup  func(t *testing.T, r *racingNode)
	run    func(r *racingNode) (error, error)
	check  func(t *testing.T, r *racingNode, errA, errB error)
}

// runRace runs tc's rounds on a new node and checks after each that the
// state is consistent and no region was programmed for a lost holder.
func runRace(t *testing.T, tc raceCase) {
	r := newRacingNode(t)
	for i := range rounds(t, tc.rounds) {
		if tc.setup != nil {
			tc.setup(t, r)
		}
		errA, errB := tc.run(r)
		tc.check(t, r, errA, errB)
		checkConsistent(t, r.Node)
		if v := r.violations.Load(); v > 0 {
			t.Fatalf("round %d: %v", i, r.lastBad.Load())
		}
		r.release(t)
	}
	if o := r.Programmer.Overlaps(); o > 0 {
		t.Fatalf("a region was programmed twice at once %d times", o)
	}
}

// racers are the holders, configs and context the races use.
type racers struct {
	ctx               context.Context
	a, b, l1, l2      state.Holder
	newAFU, secondAFU *v1alpha1.FpgaConfig
}

func newRacers() racers {
	return racers{
		ctx:       context.Background(),
		a:         holder("a"),
		b:         holder("b"),
		l1:        legacy("one"),
		l2:        legacy("two"),
		newAFU:    ask(testnode.NewAFU, v1alpha1.ProgrammingAlways),
		secondAFU: ask(testnode.SecondAFU, v1alpha1.ProgrammingAlways),
	}
}

// allocateL1 gives the device to the legacy allocation l1.
func (f racers) allocateL1(t *testing.T, r *racingNode) {
	if _, err := r.State.Prepare(f.ctx, f.l1, request(r.dev, nil), r.devs, state.Supersede(isLegacy)); err != nil {
		t.Fatal(err)
	}
}

// prepareAndUnprepare races a prepare of claim a without programming
// with its unprepare; releasedOrPrepared checks their answers.
func (f racers) prepareAndUnprepare(r *racingNode) (error, error) {
	return race(
		func() error { _, err := r.State.Prepare(f.ctx, f.a, request(r.dev, nil), r.devs); return err },
		func() error { return r.State.Unprepare(f.ctx, f.a.UID) })
}

func releasedOrPrepared(t *testing.T, r *racingNode, errP, errU error) {
	if errU != nil {
		t.Fatalf("unprepare: %v", errU)
	}
	if errP != nil && !errors.Is(errP, state.ErrReleasing) {
		t.Fatalf("prepare racing its unprepare: %v", errP)
	}
}

// claimRaces races prepares of claims, with and without programming and
// before binding, against each other.
func (f racers) claimRaces() []raceCase {
	ctx, a, b, newAFU, secondAFU := f.ctx, f.a, f.b, f.newAFU, f.secondAFU
	return []raceCase{{
		name: "two claims prepare one device", rounds: 2000,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, nil), r.devs); return err },
				func() error { _, err := r.State.Prepare(ctx, b, request(r.dev, nil), r.devs); return err })
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) { oneWinner(t, r, a, b, errA, errB) },
	}, {
		name: "two claims program one device", rounds: 300,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); return err },
				func() error { _, err := r.State.Prepare(ctx, b, request(r.dev, secondAFU), r.devs); return err })
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) {
			oneWinner(t, r, a, b, errA, errB)
			want := testnode.NewAFU
			if errA != nil {
				want = testnode.SecondAFU
			}
			if got := afuID(t, r.Node, r.dev); got != want {
				t.Fatalf("region carries %s, want the winner's %s", got, want)
			}
		},
	}, {
		name: "one claim prepared twice at once", rounds: 300,
		run: func(r *racingNode) (error, error) {
			var outs [2]state.Outcome
			errA, errB := race(
				func() (err error) { outs[0], err = r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); return err },
				func() (err error) { outs[1], err = r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); return err })
			if errA == nil && errB == nil && !slices.Equal(outs[0].Devices[0].CDIDeviceIDs, outs[1].Devices[0].CDIDeviceIDs) {
				return fmt.Errorf("different answers: %v and %v", outs[0].Devices, outs[1].Devices), nil
			}
			if len(outs[0].Programmed)+len(outs[1].Programmed) != 1 {
				return fmt.Errorf("the programming was reported %d times, want once", len(outs[0].Programmed)+len(outs[1].Programmed)), nil
			}
			return errA, errB
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) {
			if errA != nil || errB != nil {
				t.Fatalf("racing prepares of one claim: %v / %v", errA, errB)
			}
		},
	}, {
		name: "programming before binding and another claim's prepare", rounds: 300,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error {
					_, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs, state.BeforeBinding())
					return err
				},
				func() error { _, err := r.State.Prepare(ctx, b, request(r.dev, nil), r.devs); return err })
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) { oneWinner(t, r, a, b, errA, errB) },
	}, {
		name: "programming before binding and the kubelet's prepare of one claim", rounds: 300,
		run: func(r *racingNode) (error, error) {
			before := r.Programmer.TotalCalls()
			errA, errB := race(
				func() error {
					_, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs, state.BeforeBinding())
					return err
				},
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); return err })
			if n := r.Programmer.TotalCalls() - before; n != 1 {
				return fmt.Errorf("the region was programmed %d times for one claim, want once", n), nil
			}
			return errA, errB
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) {
			if errA != nil || errB != nil {
				t.Fatalf("before binding: %v; kubelet: %v", errA, errB)
			}
			if rec, _ := r.State.Claim(a.UID); rec.Phase != state.PhaseCompleted || afuID(t, r.Node, r.dev) != testnode.NewAFU {
				t.Fatalf("%s is %q with AFU %s after both, want %s with %s", a.UID, rec.Phase, afuID(t, r.Node, r.dev), state.PhaseCompleted, testnode.NewAFU)
			}
		},
	}}
}

// legacyRaces races legacy allocations against claims, each other and
// their own release.
func (f racers) legacyRaces() []raceCase {
	ctx, a, l1, l2 := f.ctx, f.a, f.l1, f.l2
	return []raceCase{{
		name: "a claim and a legacy allocation", rounds: 300,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, nil), r.devs); return err },
				func() error {
					_, err := r.State.Prepare(ctx, l1, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				})
		},
		check: func(t *testing.T, r *racingNode, errA, errB error) { oneWinner(t, r, a, l1, errA, errB) },
	}, {
		name: "a legacy allocation supersedes another while a claim asks", rounds: 300,
		setup: f.allocateL1,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error {
					_, err := r.State.Prepare(ctx, l2, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				},
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, nil), r.devs); return err })
		},
		check: func(t *testing.T, r *racingNode, errL2, errA error) {
			if errL2 != nil || !errors.Is(errA, state.ErrDeviceHeld) {
				t.Fatalf("superseding legacy allocation: %v; claim: %v, want the claim refused", errL2, errA)
			}
			if _, ok := r.State.Claim(l1.UID); ok {
				t.Fatal("the superseded holder keeps its record")
			}
		},
	}, {
		name: "a legacy allocation allocated again while another supersedes it", rounds: 1500,
		setup: f.allocateL1,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error {
					_, err := r.State.Prepare(ctx, l1, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				},
				func() error {
					_, err := r.State.Prepare(ctx, l2, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				})
		},
		check: func(t *testing.T, r *racingNode, errL1, errL2 error) {
			for _, err := range []error{errL1, errL2} {
				if err != nil && !errors.Is(err, state.ErrDeviceHeld) {
					t.Fatalf("racing allocations: %v / %v", errL1, errL2)
				}
			}
			if errL1 != nil && errL2 != nil {
				t.Fatalf("neither allocation holds the device: %v / %v", errL1, errL2)
			}
		},
	}, {
		name: "a legacy allocation allocated again while its release is decided", rounds: 1500,
		setup: f.allocateL1,
		run: func(r *racingNode) (error, error) {
			v := r.State.Version(l1.UID) // read before the evidence, as the stale releaser does
			return race(
				func() error {
					_, err := r.State.Prepare(ctx, l1, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				},
				func() error { return r.State.Unprepare(ctx, l1.UID, state.IfUnchanged(v)) })
		},
		check: func(t *testing.T, r *racingNode, errP, errU error) {
			if errU != nil && !errors.Is(errU, state.ErrChanged) {
				t.Fatalf("conditional release: %v", errU)
			}
			if errP != nil && !errors.Is(errP, state.ErrReleasing) {
				t.Fatalf("allocation racing a conditional release: %v", errP)
			}
			// An answered allocation is never released under its
			// container.
			if held := r.State.Holders()[r.dev] == l1.UID; (errP == nil) != held {
				t.Fatalf("allocation answered %v, device held by it: %v (release: %v)", errP, held, errU)
			}
		},
	}}
}

// releaseRaces races unprepares against prepares of the same or another
// claim.
func (f racers) releaseRaces() []raceCase {
	ctx, a, b, newAFU, secondAFU := f.ctx, f.a, f.b, f.newAFU, f.secondAFU
	return []raceCase{{
		name: "prepare and unprepare of one claim", rounds: 300,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error { _, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); return err },
				func() error { return r.State.Unprepare(ctx, a.UID) })
		},
		check: func(t *testing.T, r *racingNode, errP, errU error) {
			if errU != nil {
				t.Fatalf("unprepare: %v", errU)
			}
			if errP != nil && !errors.Is(errP, state.ErrReleasing) && !strings.Contains(errP.Error(), "unprepared before programming started") {
				t.Fatalf("prepare racing its unprepare: %v", errP)
			}
		},
	}, {
		name: "prepare without programming and unprepare of one claim", rounds: 2000,
		run: f.prepareAndUnprepare, check: releasedOrPrepared,
	}, {
		name: "a prepared claim prepared again and unprepared at once", rounds: 1500,
		setup: func(t *testing.T, r *racingNode) {
			if _, err := r.State.Prepare(ctx, a, request(r.dev, nil), r.devs); err != nil {
				t.Fatal(err)
			}
		},
		run: f.prepareAndUnprepare, check: releasedOrPrepared,
	}, {
		name: "unprepare of the holder and prepare of another claim", rounds: 300,
		setup: func(t *testing.T, r *racingNode) {
			if _, err := r.State.Prepare(ctx, a, request(r.dev, newAFU), r.devs); err != nil {
				t.Fatal(err)
			}
		},
		run: func(r *racingNode) (error, error) {
			return race(
				func() error { return r.State.Unprepare(ctx, a.UID) },
				func() error { _, err := r.State.Prepare(ctx, b, request(r.dev, secondAFU), r.devs); return err })
		},
		check: func(t *testing.T, r *racingNode, errU, errB error) {
			if errU != nil {
				t.Fatalf("unprepare: %v", errU)
			}
			switch got := r.State.Holders()[r.dev]; {
			case errB == nil && got != b.UID:
				t.Fatalf("b prepared but the device is held by %q", got)
			case errB != nil && (!errors.Is(errB, state.ErrDeviceHeld) || !strings.Contains(errB.Error(), a.Name) || got != ""):
				t.Fatalf("b: %v; holder %q: want b refused naming a, and a released", errB, got)
			}
		},
	}}
}

// hookRaces races the programming hook against the unprepare of its
// holder and a superseding allocation.
func (f racers) hookRaces() []raceCase {
	ctx, l1, l2 := f.ctx, f.l1, f.l2
	return []raceCase{{
		name: "the programming hook and the holder's unprepare", rounds: 300,
		setup: f.allocateL1,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error {
					_, err := r.State.ProgramHeld(ctx, l1.UID, r.dev, simnode.DefaultInterfaceID, testnode.NewAFU, r.devs)
					return err
				},
				func() error { return r.State.Unprepare(ctx, l1.UID) })
		},
		check: func(t *testing.T, r *racingNode, errP, errU error) {
			if errU != nil {
				t.Fatalf("unprepare: %v", errU)
			}
			if errP != nil && !errors.Is(errP, state.ErrNotHeld) && !errors.Is(errP, state.ErrReleasing) && !strings.Contains(errP.Error(), "unprepared before programming started") {
				t.Fatalf("programming hook racing the unprepare: %v", errP)
			}
		},
	}, {
		name: "the programming hook and a superseding allocation", rounds: 300,
		setup: f.allocateL1,
		run: func(r *racingNode) (error, error) {
			return race(
				func() error {
					_, err := r.State.ProgramHeld(ctx, l1.UID, r.dev, simnode.DefaultInterfaceID, testnode.SecondAFU, r.devs)
					return err
				},
				func() error {
					_, err := r.State.Prepare(ctx, l2, request(r.dev, nil), r.devs, state.Supersede(isLegacy))
					return err
				})
		},
		check: func(t *testing.T, r *racingNode, errP, errL2 error) {
			switch got := r.State.Holders()[r.dev]; {
			case errL2 == nil && got != l2.UID:
				t.Fatalf("l2 allocated but the device is held by %q", got)
			case errL2 != nil && (!errors.Is(errL2, state.ErrDeviceHeld) || got != l1.UID || errP != nil):
				t.Fatalf("l2: %v, hook: %v, holder %q: l2 may only be refused while l1 programs", errL2, errP, got)
			case errP != nil && !errors.Is(errP, state.ErrNotHeld):
				t.Fatalf("programming hook: %v", errP)
			}
		},
	}}
}
