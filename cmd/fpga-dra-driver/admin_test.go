package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// adminNode is a simulated node with a sample repository, a state whose
// checkpoint holds port 1 for a claim, and (when daemon) a control socket.
type adminNode struct {
	sim            *simnode.Node
	repo, plugin   string
	sample, socket string
}

func startAdminNode(t *testing.T, daemon bool) *adminNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tn := testnode.New(t, testnode.Options{})
	a := &adminNode{sim: tn.Sim, repo: tn.RepoDir, plugin: tn.DataDir}
	// The file an admin brings: outside the repository.
	paths, err := program.WriteSimRepository(t.TempDir(), simnode.DefaultInterfaceID, []string{simnode.SampleAFUID})
	if err != nil {
		t.Fatal(err)
	}
	a.sample = paths[0]
	st := tn.State
	devices := scanning(t, tn.Sim.Root)
	h := state.Holder{UID: "claim-uid-1", Namespace: "team-a", Name: "inference"}
	if _, err := st.Prepare(ctx, h, []state.DeviceRequest{{Device: "fpga-0000-02-00-0-p0"}}, devices()); err != nil {
		t.Fatal(err)
	}
	if !daemon {
		return a
	}
	a.socket = filepath.Join(a.plugin, "control.sock")
	srv, err := adminapi.Listen(ctx, a.socket, &adminapi.Node{State: st, Devices: devices})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func (a *adminNode) flags() []string {
	return []string{"--root", a.sim.Root, "--plugin-dir", a.plugin, "--bitstream-dir", a.repo, "--programmer", "sim"}
}

func TestAdminListAndProgram(t *testing.T) {
	for _, daemon := range []bool{true, false} {
		name := "offline"
		if daemon {
			name = "daemon"
		}
		t.Run(name, func(t *testing.T) {
			a := startAdminNode(t, daemon)
			listFlags := a.flags()[:4]
			out, err := execute(t, newListCommand(), append(listFlags, "-o", "json")...)
			if err != nil {
				t.Fatal(err)
			}
			var list adminapi.DeviceList
			if err := json.Unmarshal([]byte(out), &list); err != nil {
				t.Fatalf("list -o json: %v\n%s", err, out)
			}
			if len(list.Devices) != 2 || list.Devices[0].Holder != nil || list.Devices[1].Holder == nil || list.Devices[1].Holder.Name != "inference" {
				t.Fatalf("list: %+v", list.Devices)
			}
			if out, err := execute(t, newListCommand(), listFlags...); err != nil || !strings.Contains(out, "team-a/inference") {
				t.Fatalf("list table does not show the holder (%v):\n%s", err, out)
			}

			// The held port is refused, naming the claim.
			_, err = execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.1", "--bitstream", a.sample)...)
			if err == nil || !strings.Contains(err.Error(), "inference") {
				t.Fatalf("programming a held port: %v, want a refusal naming the claim", err)
			}
			// The free port is programmed from the repository copy.
			out, err = execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", a.sample)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, simnode.SampleAFUID) || !strings.Contains(out, a.repo) {
				t.Fatalf("program output:\n%s", out)
			}
			b, err := os.ReadFile(filepath.Join(a.sim.Cards[0].Ports[0].SysfsPath, "afu_id"))
			if err != nil || strings.TrimSpace(string(b)) != simnode.SampleAFUID {
				t.Fatalf("afu_id %q (%v)", b, err)
			}
			if _, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.7", "--bitstream", a.sample)...); err == nil {
				t.Fatal("programming an unknown port succeeded")
			}
		})
	}
}

// TestAdminProgramNewBuildNamesAWorkingFix: programming a new build of an
// AFU whose older build is in the repository is refused, and the refusal
// names the fix; the fix it names must work with this command.
func TestAdminProgramNewBuildNamesAWorkingFix(t *testing.T) {
	a := startAdminNode(t, false)
	if _, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", a.sample)...); err != nil {
		t.Fatal(err)
	}
	rebuilt := rebuiltGBS(t, 8192)
	_, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", rebuilt)...)
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("programming another build: %v, want a refusal naming --force", err)
	}
	if _, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", rebuilt, "--force")...); err != nil {
		t.Fatalf("the fix the refusal names fails: %v", err)
	}
	want, err := os.ReadFile(rebuilt)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(a.repo, simnode.DefaultInterfaceID, simnode.SampleAFUID+".gbs"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the repository does not hold the new build after --force (%v)", err)
	}
}

// TestAdminProgramOfflineRefusedWhileTheDaemonRuns: when the daemon's
// control socket does not answer (gone, not reachable by this user, too
// slow) but the daemon holds the node's state lock, programming offline
// would race its own programming and holds: it is refused, naming the
// socket, and nothing is programmed.
func TestAdminProgramOfflineRefusedWhileTheDaemonRuns(t *testing.T) {
	a := startAdminNode(t, false)
	lock, err := flock.Acquire(context.Background(), filepath.Join(a.plugin, stateLockFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(a.sim.Cards[0].Ports[0].SysfsPath, "afu_id"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", a.sample)...)
	if err == nil || !strings.Contains(err.Error(), "control socket") {
		t.Fatalf("programming offline while the daemon holds the state lock: %v, want a refusal naming the control socket", err)
	}
	if after, _ := os.ReadFile(filepath.Join(a.sim.Cards[0].Ports[0].SysfsPath, "afu_id")); !bytes.Equal(after, before) {
		t.Errorf("afu_id changed from %q to %q", before, after)
	}
	// Once the daemon is gone, the same command programs offline.
	lock.Close()
	if _, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", a.sample)...); err != nil {
		t.Fatal(err)
	}
}

// TestAdminProgramOfflineWithoutPluginDir: on a node where the daemon never
// ran (its plugin directory does not exist: a host being brought up),
// nothing holds the state lock and nothing is prepared: programming
// offline must work, as it did before it took the lock, not be refused as
// if a daemon ran whose control socket did not answer.
func TestAdminProgramOfflineWithoutPluginDir(t *testing.T) {
	a := startAdminNode(t, false)
	a.plugin = filepath.Join(t.TempDir(), "never-started")
	out, err := execute(t, newProgramCommand(), append(a.flags(), "--port", "/dev/dfl-port.0", "--bitstream", a.sample)...)
	if err != nil {
		t.Fatalf("programming offline on a node the daemon never ran on: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(a.sim.Cards[0].Ports[0].SysfsPath, "afu_id")); !strings.Contains(string(got), simnode.SampleAFUID) {
		t.Errorf("afu_id after programming offline: %q, want %s", got, simnode.SampleAFUID)
	}
}
