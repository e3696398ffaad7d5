package state_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// damage is one way to damage a checkpoint file.
type damage struct {
	name string
	do   func(b []byte) []byte
}

// damages lists, for a checkpoint file b, a flip of every byte its two
// slots use, zeroed windows and truncations at every 16 bytes of them, and
// whole-file garbage.
func damages(b []byte) []damage {
	half := len(b) / 2
	used := func(slot int) int {
		return 52 + int(binary.LittleEndian.Uint32(b[slot+16:]))
	}
	var out []damage
	for _, slot := range []int{0, half} {
		n := used(slot)
		for i := slot; i < slot+n; i++ {
			out = append(out, damage{fmt.Sprintf("flip byte %d", i), func(b []byte) []byte { b[i] ^= 0xff; return b }})
		}
		for i := slot; i < slot+n; i += 16 {
			for _, w := range []int{16, 64, 512} {
				out = append(out, damage{fmt.Sprintf("zero %d bytes at %d", w, i), func(b []byte) []byte {
					clear(b[i:min(i+w, len(b))])
					return b
				}})
			}
			out = append(out, damage{fmt.Sprintf("truncate at %d", i), func(b []byte) []byte { return b[:i] }})
		}
	}
	for _, i := range []int{0, half - 1, half, half + 1, len(b) - 1} {
		out = append(out, damage{fmt.Sprintf("truncate at %d", i), func(b []byte) []byte { return b[:i] }})
	}
	out = append(out,
		damage{"garbage", func([]byte) []byte { return []byte("\x00garbage") }},
		damage{"halves swapped and cut", func(b []byte) []byte { return append(b[half:], b[:100]...) }},
		damage{"doubled", func(b []byte) []byte { return append(b, b...) }})
	return out
}

// TestCheckpointDamageNeverForgetsAClaim damages every byte range of a
// checkpoint that records two prepared claims, the newest save being the
// second claim's, and starts the driver on it each time: both claims must
// still hold their devices (from the checkpoint's older slot or from their
// CDI specs), no CDI spec may be removed, another claim must be refused
// both devices, and any damage found must be reported.
func TestCheckpointDamageNeverForgetsAClaim(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	ports := devs.Ports()
	a, b := holder("a"), holder("b")
	ctx := context.Background()
	for i, h := range []state.Holder{a, b} {
		if _, err := n.State.Prepare(ctx, h, request(ports[i].DeviceName(), nil), devs); err != nil {
			t.Fatal(err)
		}
	}
	pristine, err := os.ReadFile(filepath.Join(n.DataDir, state.CheckpointFileName))
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string][]byte{}
	for _, h := range []state.Holder{a, b} {
		p := n.CDI.SpecPath(string(h.UID))
		if specs[p], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	// A tmpfs keeps the thousands of restarts quick; the checkpoint code
	// is the same.
	dir := t.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err = os.MkdirTemp("/dev/shm", "fdra-damage-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	cases := damages(pristine)
	if testing.Short() {
		var some []damage
		for i := 0; i < len(cases); i += max(1, len(cases)/200) {
			some = append(some, cases[i])
		}
		cases = some
	}
	quiet := klog.NewContext(ctx, klog.Background().V(100))
	detected := 0
	for _, d := range cases {
		for p, spec := range specs {
			if err := os.WriteFile(p, spec, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, state.CheckpointFileName)
		if err := os.WriteFile(path, d.do(append([]byte(nil), pristine...)), 0o600); err != nil {
			t.Fatal(err)
		}
		st, warning, err := state.New(quiet, state.Config{CheckpointPath: path, CDI: n.CDI, Programmable: true, SkipSync: true})
		if err != nil {
			t.Fatalf("%s: the driver does not start: %v", d.name, err)
		}
		report, err := st.Restore(quiet, devs)
		if err != nil {
			t.Fatalf("%s: restore: %v", d.name, err)
		}
		if warning != nil {
			detected++
			if !errors.Is(warning, state.ErrCorruptCheckpoint) || report.Damage == "" {
				t.Fatalf("%s: damage not reported: warning %v, report %+v", d.name, warning, report)
			}
		}
		holds := st.Holders()
		for i, h := range []state.Holder{a, b} {
			if got := holds[ports[i].DeviceName()]; got != h.UID {
				t.Fatalf("%s: device %s is held by %q after the restart, want %s (recovered %v, warning %v)", d.name, ports[i].DeviceName(), got, h.UID, report.Recovered, warning)
			}
			if _, err := st.Prepare(ctx, holder("intruder"), request(ports[i].DeviceName(), nil), devs); !errors.Is(err, state.ErrDeviceHeld) {
				t.Fatalf("%s: another claim on %s's device: %v", d.name, h.Name, err)
			}
		}
		for p := range specs {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("%s: CDI spec removed: %v", d.name, err)
			}
		}
		if len(report.Removed) != 0 {
			t.Fatalf("%s: removed specs %v", d.name, report.Removed)
		}
		// Keep the next case's CDI directory to the two specs.
		for _, uid := range mustList(t, n.CDI) {
			if p := n.CDI.SpecPath(uid); specs[p] == nil {
				os.Remove(p)
			}
		}
		if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) > 0 {
			for _, f := range aside {
				os.Remove(f)
			}
		}
	}
	t.Logf("%d kinds of damage, %d detected as such (the rest hit bytes no reader uses)", len(cases), detected)
	if detected == 0 {
		t.Fatal("no damage was detected")
	}
}

func mustList(t *testing.T, w *cdi.Writer) []string {
	t.Helper()
	uids, err := w.ListClaimSpecs()
	if err != nil {
		t.Fatal(err)
	}
	return uids
}
