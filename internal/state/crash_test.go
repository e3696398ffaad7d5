package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// crashPlanEnv carries a crashPlan to the test binary run as a child.
const crashPlanEnv = "FPGA_DRA_STATE_CRASH_PLAN"

// stepInProgrammer is a crash inside the backend, while it programs.
const stepInProgrammer = "in-programmer"

// crashPlan is what the child does: Before to completion, then Op with a
// SIGKILL of itself armed at Step.
type crashPlan struct {
	Root, RepoDir, CDIDir, DataDir string
	Before                         []crashOp
	Op                             crashOp
	Step                           string
}

// crashOp is one entry point call.
type crashOp struct {
	Kind   string // prepare, legacy (prepare superseding legacy holders), unprepare, program-held
	Holder string
	Device string
	AFU    string // "" hands the device over as it is
}

func TestMain(m *testing.M) {
	if plan := os.Getenv(crashPlanEnv); plan != "" {
		os.Exit(crashChild(plan))
	}
	os.Exit(m.Run())
}

// crashChild runs a plan as the daemon would and kills itself at its
// step. It returns only when the step was never reached.
func crashChild(encoded string) int {
	var plan crashPlan
	if err := json.Unmarshal([]byte(encoded), &plan); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := klog.NewContext(context.Background(), klog.Background().V(100))
	armed := false
	die := func() {
		if armed {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	sim := &program.SimProgrammer{}
	if plan.Step == stepInProgrammer {
		sim.OnStart = func(*discovery.Card, *discovery.Port) { die() }
	}
	writer, err := cdi.NewWriter(testnode.DriverName, testnode.CDIClass, plan.CDIDir)
	if err == nil {
		var repo *program.Repository
		if repo, err = program.NewRepository(ctx, plan.RepoDir); err == nil {
			var st *state.State
			st, _, err = state.New(ctx, state.Config{
				CheckpointPath: filepath.Join(plan.DataDir, checkpoint.FileName),
				BootIDPath:     filepath.Join(plan.Root, "proc/sys/kernel/random/boot_id"),
				CDI:            writer, Repository: repo, Programmer: sim, Programmable: true,
				OnStep: func(step state.Step, _ types.UID) {
					if string(step) == plan.Step {
						die()
					}
				},
			})
			if err == nil {
				err = runCrashPlan(ctx, st, plan, &armed)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintf(os.Stderr, "step %s was never reached\n", plan.Step)
	return 3
}

func runCrashPlan(ctx context.Context, st *state.State, plan crashPlan, armed *bool) error {
	devs, err := (&discovery.Scanner{Root: plan.Root}).Scan()
	if err != nil {
		return err
	}
	if _, err := st.Restore(ctx, devs); err != nil {
		return err
	}
	for _, op := range plan.Before {
		if err := op.run(ctx, st, devs); err != nil {
			return fmt.Errorf("before the crash: %s: %w", op.Kind, err)
		}
	}
	*armed = true
	return plan.Op.run(ctx, st, devs)
}

func (op crashOp) run(ctx context.Context, st *state.State, devs *discovery.Result) error {
	var cfg *v1alpha1.FpgaConfig
	if op.AFU != "" {
		cfg = ask(op.AFU, v1alpha1.ProgrammingAlways)
	}
	switch op.Kind {
	case "prepare":
		_, err := st.Prepare(ctx, holder(op.Holder), request(op.Device, cfg), devs)
		return err
	case "legacy":
		_, err := st.Prepare(ctx, legacy(op.Holder), request(op.Device, nil), devs, state.Supersede(isLegacy))
		return err
	case "unprepare":
		return st.Unprepare(ctx, holder(op.Holder).UID)
	case "program-held":
		_, err := st.ProgramHeld(ctx, legacy(op.Holder).UID, op.Device, simnode.DefaultInterfaceID, op.AFU, devs)
		return err
	}
	return fmt.Errorf("unknown operation %q", op.Kind)
}

// TestKillAtEveryStep kills the daemon (SIGKILL, in a child process on the
// same node) at every step of prepare, programming, unprepare, the
// programming hook and a superseding legacy allocation, restarts on the
// same files and checks that the node's record is consistent and the
// interrupted operation completes when the kubelet calls again, with the
// device never given to two holders.
func TestKillAtEveryStep(t *testing.T) {
	const a, b, l1, l2 = "a", "b", "one", "two"
	for _, sc := range []struct {
		name   string
		before []crashOp
		op     crashOp
		steps  []state.Step
		// after completes the operation as the kubelet would and checks.
		after func(t *testing.T, n *testnode.Node, dev string, step state.Step)
	}{{
		name:  "prepare with programming",
		op:    crashOp{Kind: "prepare", Holder: a, AFU: testnode.NewAFU},
		steps: []state.Step{state.StepReserved, state.StepStarted, state.StepProgramming, stepInProgrammer, state.StepProgrammed, state.StepSpecWritten, state.StepPrepared},
		after: func(t *testing.T, n *testnode.Node, dev string, step state.Step) {
			if h, ok := n.State.Holders()[dev]; (step == state.StepPrepared || step == state.StepStarted || step == state.StepProgrammed) && (!ok || h != holder(a).UID) {
				t.Fatalf("after a crash at %s the device is held by %q, want a (its hold was on disk)", step, h)
			}
			prepareUntilDone(t, n.State, holder(a), request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), n.Devices(t))
			if got := afuID(t, n, dev); got != testnode.NewAFU {
				t.Fatalf("region carries %s once a is prepared again, want %s", got, testnode.NewAFU)
			}
			mustBeRefused(t, n, dev, a)
			unprepareUntilDone(t, n.State, holder(a).UID)
			prepareUntilDone(t, n.State, holder(b), request(dev, nil), n.Devices(t))
		},
	}, {
		name:  "prepare without programming",
		op:    crashOp{Kind: "prepare", Holder: a},
		steps: []state.Step{state.StepReserved, state.StepSpecWritten, state.StepPrepared},
		after: func(t *testing.T, n *testnode.Node, dev string, step state.Step) {
			prepareUntilDone(t, n.State, holder(a), request(dev, nil), n.Devices(t))
			mustBeRefused(t, n, dev, a)
			unprepareUntilDone(t, n.State, holder(a).UID)
			prepareUntilDone(t, n.State, holder(b), request(dev, nil), n.Devices(t))
		},
	}, {
		name:   "unprepare",
		before: []crashOp{{Kind: "prepare", Holder: a, AFU: testnode.NewAFU}},
		op:     crashOp{Kind: "unprepare", Holder: a},
		steps:  []state.Step{state.StepSpecRemoved, state.StepReleased},
		after: func(t *testing.T, n *testnode.Node, dev string, step state.Step) {
			if step == state.StepSpecRemoved {
				mustBeRefused(t, n, dev, a)
			}
			unprepareUntilDone(t, n.State, holder(a).UID)
			prepareUntilDone(t, n.State, holder(b), request(dev, nil), n.Devices(t))
		},
	}, {
		name:   "programming hook",
		before: []crashOp{{Kind: "legacy", Holder: l1}},
		op:     crashOp{Kind: "program-held", Holder: l1, AFU: testnode.NewAFU},
		steps:  []state.Step{state.StepProgramming, stepInProgrammer, state.StepProgrammed},
		after: func(t *testing.T, n *testnode.Node, dev string, step state.Step) {
			if _, err := n.State.ProgramHeld(context.Background(), legacy(l1).UID, dev, simnode.DefaultInterfaceID, testnode.NewAFU, n.Devices(t)); err != nil {
				t.Fatalf("programming hook again: %v", err)
			}
			if got := afuID(t, n, dev); got != testnode.NewAFU {
				t.Fatalf("region carries %s, want %s", got, testnode.NewAFU)
			}
			unprepareUntilDone(t, n.State, legacy(l1).UID)
		},
	}, {
		name:   "superseding legacy allocation",
		before: []crashOp{{Kind: "legacy", Holder: l1}},
		op:     crashOp{Kind: "legacy", Holder: l2},
		steps:  []state.Step{state.StepReserved, state.StepSpecWritten, state.StepPrepared},
		after: func(t *testing.T, n *testnode.Node, dev string, step state.Step) {
			if _, err := n.State.Prepare(context.Background(), legacy(l2), request(dev, nil), n.Devices(t), state.Supersede(isLegacy)); err != nil {
				t.Fatalf("legacy allocation again: %v", err)
			}
			if _, ok := n.State.Claim(legacy(l1).UID); ok {
				t.Fatal("the superseded holder survived")
			}
			mustBeRefused(t, n, dev, "two")
		},
	}} {
		for _, step := range sc.steps {
			t.Run(sc.name+"/"+string(step), func(t *testing.T) {
				n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
				dev := n.Devices(t).Ports()[0].DeviceName()
				plan := crashPlan{Root: n.Sim.Root, RepoDir: n.RepoDir, CDIDir: n.CDIDir, DataDir: n.DataDir, Op: sc.op, Step: string(step)}
				for _, op := range sc.before {
					op.Device = dev
					plan.Before = append(plan.Before, op)
				}
				plan.Op.Device = dev
				runCrashChild(t, plan)

				restarted := testnode.New(t, testnode.Options{Restart: n})
				if restarted.StateWarning != nil {
					t.Fatalf("a kill left the checkpoint damaged: %v", restarted.StateWarning)
				}
				checkConsistent(t, restarted)
				sc.after(t, restarted, dev, step)
				checkConsistent(t, restarted)
			})
		}
	}
}

// runCrashChild runs the plan in a child process and requires that it was
// killed.
func runCrashChild(t *testing.T, plan crashPlan) {
	t.Helper()
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashPlanEnv+"="+string(b))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child was not killed at %s: %v\n%s", plan.Step, err, out)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed at %s: %v\n%s", plan.Step, err, out)
	}
}

// mustBeRefused checks that another claim cannot take device from name.
func mustBeRefused(t *testing.T, n *testnode.Node, device, name string) {
	t.Helper()
	_, err := n.State.Prepare(context.Background(), holder("intruder"), request(device, nil), n.Devices(t))
	if !errors.Is(err, state.ErrDeviceHeld) {
		t.Fatalf("another claim on the device %s holds: %v, want it refused", name, err)
	}
}
