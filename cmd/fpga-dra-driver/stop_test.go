package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestStopDeadline: a stop signal that run does not answer within the
// limit ends the process with status 1; a run that returns in time, or a
// stop by the caller (the parent context, as in tests), does not.
func TestStopDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		byParent bool
		returns  bool
		wantExit bool
	}{
		{name: "signal, run hangs", wantExit: true},
		{name: "signal, run returns", returns: true},
		{name: "caller stops, run hangs", byParent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.Background())
			defer cancelParent()
			ctx, signal := context.WithCancel(parent)
			if tc.byParent {
				cancelParent()
			}
			signal()
			returned := make(chan struct{})
			limit := time.Hour
			if tc.wantExit {
				limit = time.Millisecond
			}
			if tc.returns {
				close(returned)
			}
			code := -1
			stopDeadline(ctx, parent, limit, returned, func(c int) { code = c })
			if got := code == 1; got != tc.wantExit {
				t.Fatalf("exit status %d (-1: no exit); want exit(1) %v", code, tc.wantExit)
			}
		})
	}
}

// TestStopCancelsProgrammingAfterShutdownWait: a daemon stopped while an
// admin programs a region through its control socket waits --shutdown-wait
// for it, then cancels it and stops, well within jobStopWait of the wait:
// the control socket's drain runs within the wait, not after it.
func TestStopCancelsProgrammingAfterShutdownWait(t *testing.T) {
	sim, err := simnode.Write(t.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 1, PortsPerCard: 1})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, base := daemonDirs(t)
	if _, err := program.WriteSimRepository(filepath.Join(base, "bs"), simnode.DefaultInterfaceID, []string{simnode.SampleAFUID}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const shutdownWait = 100 * time.Millisecond
	ctlDir := filepath.Join(base, "ctl")
	socket := filepath.Join(ctlDir, "control.sock")
	done := runDaemon(ctx, t, ctlDir, simDaemonArgs(kubeconfig, sim.Root, base, "--uevent-source", "none",
		"--pod-resources-socket", filepath.Join(base, "pr.sock"), "--control-socket", socket,
		"--sim-program-delay", "1h", "--shutdown-wait", shutdownWait.String()))

	client := adminapi.NewClient(socket)
	programmed := make(chan error, 1)
	go func() {
		_, err := client.Program(context.Background(), adminapi.ProgramRequest{Device: "dfl-port.0", InterfaceID: simnode.DefaultInterfaceID, AFUID: simnode.SampleAFUID, Admin: true})
		programmed <- err
	}()
	// The checkpoint records the admin's hold as started just before the
	// programming job starts.
	checkpoint := filepath.Join(base, "p", checkpoint.FileName)
	for deadline := time.Now().Add(stopFailSafe); !programmingStarted(t, checkpoint); {
		if time.Now().After(deadline) {
			t.Fatalf("programming did not start within %s", stopFailSafe)
		}
		time.Sleep(10 * time.Millisecond)
	}

	stopped := time.Now()
	cancel() // what SIGTERM does through signal.NotifyContext
	waitStopped(t, done, "an admin programmed a region")
	if took := time.Since(stopped); took >= shutdownWait+jobStopWait {
		t.Errorf("the stop took %s; want less than the shutdown wait (%s) and the wait for cancelled programming (%s): programming stops at once when cancelled", took, shutdownWait, jobStopWait)
	}
	if err := <-programmed; err == nil {
		t.Error("the admin's programming, cancelled by the stop, succeeded")
	}
}

// programmingStarted reports whether the checkpoint at path records a hold
// whose programming started and has not ended.
func programmingStarted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range cp.Claims {
		if rec.Phase == state.PhaseStarted {
			return true
		}
	}
	return false
}
