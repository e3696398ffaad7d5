package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/internal/version"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

func execute(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return out.String(), err
}

func sampleBitstream(t *testing.T) string {
	t.Helper()
	paths, err := program.WriteSimRepository(t.TempDir(), simnode.DefaultInterfaceID, []string{simnode.SampleAFUID})
	if err != nil {
		t.Fatal(err)
	}
	return paths[0]
}

func TestInfo(t *testing.T) {
	path := sampleBitstream(t)
	out, err := execute(t, newInfoCommand(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"INTERFACE ID", simnode.DefaultInterfaceID, simnode.SampleAFUID, "gbs", "SHA256"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	out, err = execute(t, newInfoCommand(), "-o", "json", path)
	if err != nil {
		t.Fatal(err)
	}
	var info bitstreamInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if info.AFUID != simnode.SampleAFUID || len(info.SHA256) != 64 || info.PayloadBytes == 0 {
		t.Fatalf("json %+v", info)
	}
	bad := filepath.Join(t.TempDir(), "x.gbs")
	if err := os.WriteFile(bad, []byte("XeonFPGA"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := execute(t, newInfoCommand(), bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("info on a truncated file: %v", err)
	}
}

// TestInfoXclbin: an xclbin's header shows its interface UUID, xclbin
// UUID and platform.
func TestInfoXclbin(t *testing.T) {
	m := simnode.AlveoModels["u55c"]
	paths, err := program.WriteSimXclbinRepository(t.TempDir(), m.InterfaceIDs[0], m.Platform, []string{simnode.SampleXclbinUUID})
	if err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, newInfoCommand(), "-o", "json", paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var info bitstreamInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	if info.Format != "xclbin" || info.InterfaceID != m.InterfaceIDs[0] || info.AFUID != simnode.SampleXclbinUUID || info.Platform != m.Platform {
		t.Fatalf("info %+v, want the xclbin's format, interface UUID, xclbin UUID and platform %s", info, m.Platform)
	}
}

func TestInstall(t *testing.T) {
	src := sampleBitstream(t)
	repo := t.TempDir()
	out, err := execute(t, newInstallCommand(), "--bitstream-dir", repo, src)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(simnode.DefaultInterfaceID, simnode.SampleAFUID+".gbs")
	if !strings.Contains(out, want) {
		t.Fatalf("output does not name the installed file %s:\n%s", want, out)
	}
	if _, err := os.Stat(filepath.Join(repo, want)); err != nil {
		t.Fatal(err)
	}
	// Another build of the same AFU: refused without --force.
	rebuilt := rebuiltGBS(t, 128)
	if _, err := execute(t, newInstallCommand(), "--bitstream-dir", repo, rebuilt); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("overwrite without --force: %v", err)
	}
	if _, err := execute(t, newInstallCommand(), "--bitstream-dir", repo, "--force", rebuilt); err != nil {
		t.Fatalf("--force: %v", err)
	}
}

// scanning returns a function that discovers the node below root afresh
// at each call, reporting a failed scan as a test error.
func scanning(t *testing.T, root string) func() *discovery.Result {
	scanner := &discovery.Scanner{Root: root}
	return func() *discovery.Result {
		res, err := scanner.Scan()
		if err != nil {
			t.Error(err)
		}
		return res
	}
}

// rebuiltGBS writes a new build of the sample AFU ("rebuilt", with a
// simulated payload of size bytes) to a temporary file and returns its
// path.
func rebuiltGBS(t *testing.T, size int) string {
	t.Helper()
	payload, err := program.SimPayload(simnode.SampleAFUID, size)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := program.WriteGBS(&b, program.NewGBSMetadata(simnode.DefaultInterfaceID, simnode.SampleAFUID, "rebuilt"), payload); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rebuilt.gbs")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVersion: --version prints the version and the commit, and runs
// nothing else.
func TestVersion(t *testing.T) {
	out, err := execute(t, newRootCommand(), "--version")
	if err != nil || !strings.Contains(out, version.Version()) || !strings.Contains(out, "commit "+version.GitCommit()) {
		t.Errorf("--version: %v\n%s\nwant the version %s and commit %s", err, out, version.Version(), version.GitCommit())
	}
}
