package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/internal/logging"
)

// discoverSlices runs the discover command through the root command (so
// environment twins apply) and decodes its output.
func discoverSlices(t *testing.T, format string, args ...string) []resourceapi.ResourceSlice {
	t.Helper()
	cmd := newRootCommand()
	var out, warnings bytes.Buffer
	cmd.SetArgs(append([]string{"discover", "-o", format}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&warnings)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("discover %v: %v\n%s", args, err, warnings.String())
	}
	var list resourceapi.ResourceSliceList
	decode := json.Unmarshal
	if format == "yaml" {
		decode = func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
	}
	if err := decode(out.Bytes(), &list); err != nil {
		t.Fatalf("decode %s output: %v\n%s", format, err, out.String())
	}
	return list.Items
}

// TestSimulateThenDiscover: the README's main job without a cluster. The
// simulate command writes a node with SR-IOV VF ports; discover prints one
// slice with a device per port, each marked as on a virtual function, in
// JSON and YAML alike.
func TestSimulateThenDiscover(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	if out, err := execute(t, newRootCommand(), "simulate", "--dir", dir, "--driver", "dfl", "--cards", "2", "--ports-per-card", "2", "--vf"); err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	for _, format := range []string{"json", "yaml"} {
		got := discoverSlices(t, format, "--root", dir, "--node-name", "worker-9")
		if len(got) != 1 || got[0].Spec.NodeName == nil || *got[0].Spec.NodeName != "worker-9" {
			t.Fatalf("%s: %d slices (%+v), want one for worker-9", format, len(got), got)
		}
		var vf []string
		for _, d := range got[0].Spec.Devices {
			if v := d.Attributes[resourceapi.QualifiedName("fpga.dra.dev/"+"virtualFunction")]; v.BoolValue != nil && *v.BoolValue {
				vf = append(vf, d.Name)
			}
			if d.Attributes["resource.kubernetes.io/pciBusID"].StringValue == nil {
				t.Errorf("%s: device %s has no pciBusID", format, d.Name)
			}
		}
		if n := len(got[0].Spec.Devices); n != 4 || len(vf) != n {
			t.Errorf("%s: %d devices, %d on virtual functions (%v); want 4, each port on its VF", format, n, len(vf), vf)
		}
	}
}

// TestDiscoverUnusableTree: discover exits non-zero and says why when the
// tree has no driver or no usable port; a card without an interface ID is
// left out with a warning while the others are printed.
func TestDiscoverUnusableTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	if out, err := execute(t, newRootCommand(), "simulate", "--dir", dir, "--driver", "opae", "--cards", "2", "--ports-per-card", "1"); err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	ids, err := filepath.Glob(filepath.Join(dir, "sys/devices/*/*/*/fpga/*/intel-fpga-fme.*/pr/interface_id"))
	if err != nil || len(ids) != 2 {
		t.Fatalf("interface_id files %v (%v), want 2", ids, err)
	}
	slices.Sort(ids)
	if err := os.Remove(ids[0]); err != nil {
		t.Fatal(err)
	}
	if got := discoverSlices(t, "json", "--root", dir); len(got) != 1 || len(got[0].Spec.Devices) != 1 {
		t.Errorf("one card without an interface ID: got %+v, want the other card's one device", got)
	}
	if err := os.Remove(ids[1]); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		root string
		want []string
	}{
		{dir, []string{"opae driver is loaded", "no usable FPGA port", "interface_id"}},
		{t.TempDir(), []string{"no FPGA kernel driver", "sys/class/fpga"}},
		{filepath.Join(dir, "missing"), []string{"discovery root", "missing: no such file or directory", "sys/ and dev/"}},
	} {
		out, err := execute(t, newRootCommand(), "discover", "--root", tc.root)
		if err == nil {
			t.Errorf("discover --root %s succeeded:\n%s", tc.root, out)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out+err.Error(), w) {
				t.Errorf("discover --root %s: %v\n%s\nwant it to mention %q", tc.root, err, out, w)
			}
		}
	}
}

// TestDaemonFlagsHaveEnvironmentTwins: every flag of the daemon (logging's
// aside) can be set from the environment, for DaemonSet manifests; a twin
// the flag cannot parse stops the command before it does anything.
func TestDaemonFlagsHaveEnvironmentTwins(t *testing.T) {
	logs := pflag.NewFlagSet("logging", pflag.ContinueOnError)
	logging.New().AddFlags(logs)
	newRunCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if logs.Lookup(f.Name) == nil && len(f.Annotations["flagenv.twin"]) != 1 {
			t.Errorf("--%s has no environment twin", f.Name)
		}
	})

	dir := filepath.Join(t.TempDir(), "node")
	if out, err := execute(t, newRootCommand(), "simulate", "--dir", dir, "--driver", "dfl", "--cards", "1", "--ports-per-card", "1"); err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	t.Setenv("FPGA_ROOT", dir)
	if got := discoverSlices(t, "json"); len(got) != 1 || len(got[0].Spec.Devices) != 1 {
		t.Errorf("discover with $FPGA_ROOT=%s: %+v, want the simulated port", dir, got)
	}

	t.Setenv("REFRESH_INTERVAL", "soon")
	out, err := execute(t, newRootCommand(), "run", "--node-name", "worker-1")
	if err == nil || !strings.Contains(err.Error(), `REFRESH_INTERVAL="soon"`) || !strings.Contains(err.Error(), "--refresh-interval") {
		t.Errorf("run with REFRESH_INTERVAL=soon: %v\n%s\nwant an error naming the variable, its value and the flag", err, out)
	}
}
