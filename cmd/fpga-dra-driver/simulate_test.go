package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulateKeepExisting: with --keep-existing, a second run with the
// same options leaves the node (boot ID, loaded functions) as it was; other
// options, or no --keep-existing, write it afresh (a simulated reboot).
func TestSimulateKeepExisting(t *testing.T) {
	dir := t.TempDir()
	bootID := filepath.Join(dir, "proc/sys/kernel/random/boot_id")
	simulate := func(args ...string) string {
		t.Helper()
		out, err := execute(t, newRootCommand(), append([]string{"simulate", "--dir", dir, "--driver", "dfl"}, args...)...)
		if err != nil {
			t.Fatalf("simulate %v: %v\n%s", args, err, out)
		}
		b, err := os.ReadFile(bootID)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := simulate("--cards", "1", "--keep-existing")
	// What a programmed region would have changed since.
	afu := filepath.Join(dir, "sys/class/fpga_region")
	if _, err := os.Stat(afu); err != nil {
		t.Fatalf("no regions written: %v", err)
	}
	if got := simulate("--cards", "1", "--keep-existing"); got != first {
		t.Errorf("same options with --keep-existing: boot ID %q changed to %q, want the node kept", strings.TrimSpace(first), strings.TrimSpace(got))
	}
	second := simulate("--cards", "2", "--keep-existing")
	if second == first {
		t.Errorf("other options with --keep-existing: boot ID kept, want the node written afresh")
	}
	if got := simulate("--cards", "2"); got == second {
		t.Errorf("without --keep-existing: boot ID kept, want the node written afresh")
	}
}
