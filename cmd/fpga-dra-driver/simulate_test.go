package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestSimulateAlveo: simulate lays out Alveo cards alone and beside Intel
// cards with sample xclbins for their shells; discover shows one device per
// card, of the XRT family, with the shell's attributes, and --kernel-driver
// picks families.
func TestSimulateAlveo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		intel int
	}{
		{"alone", []string{"--cards", "0", "--driver", "none"}, 0},
		{"beside DFL cards", []string{"--cards", "2", "--driver", "dfl"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "node")
			out, err := execute(t, newRootCommand(), append([]string{"simulate", "--dir", dir, "--alveo", "u250,u55c"}, tc.args...)...)
			if err != nil {
				t.Fatalf("simulate: %v\n%s", err, out)
			}
			for _, m := range []string{"u250", "u55c"} {
				want := filepath.Join(dir, "srv/fpga/bitstreams", simnode.AlveoModels[m].InterfaceIDs[0], simnode.SampleXclbinUUID+".xclbin")
				if !strings.Contains(out, want) {
					t.Errorf("simulate output does not name the sample xclbin %s:\n%s", want, out)
				}
			}
			for sel, want := range map[string]int{"auto": tc.intel + 2, "xrt": 2, "auto,-xrt": tc.intel} {
				if want == 0 {
					continue // discover fails on a node without devices (TestDiscoverUnusableTree)
				}
				var xrt []string
				total := 0
				for _, s := range discoverSlices(t, "json", "--root", dir, "--kernel-driver", sel) {
					for _, d := range s.Spec.Devices {
						total++
						if v := d.Attributes["fpga.dra.dev/kernelDriver"].StringValue; v == nil || *v != "xrt" {
							continue
						}
						xrt = append(xrt, d.Name)
						for _, a := range []string{"platform", "shellTimestamp", "logicUUID", "serial", "interfaceID"} {
							if v := d.Attributes[resourceapi.QualifiedName("fpga.dra.dev/"+a)].StringValue; v == nil || *v == "" {
								t.Errorf("--kernel-driver %s: device %s has no %s", sel, d.Name, a)
							}
						}
					}
				}
				if total != want {
					t.Errorf("--kernel-driver %s: %d devices, want %d", sel, total, want)
				}
				if sel == "xrt" && !slices.Equal(xrt, []string{"fpga-0001-01-00-1-p0", "fpga-0001-02-00-1-p0"}) {
					t.Errorf("Alveo devices %v, want one per card named after its user PF", xrt)
				}
			}
		})
	}
}

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
