package state_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
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
// second claim's, which programmed its region (so the older save has it
// only started), and starts the driver on it each time: both claims must
// still hold their devices as prepared (from the checkpoint's older slot
// or from their CDI specs), no CDI spec may be removed, another claim must
// be refused both devices, and any damage found must be reported.
func TestCheckpointDamageNeverForgetsAClaim(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	ports := devs.Ports()
	a, b := holder("a"), holder("b")
	ctx := context.Background()
	if _, err := n.State.Prepare(ctx, a, request(ports[0].DeviceName(), nil), devs); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(ctx, b, request(ports[1].DeviceName(), ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); err != nil {
		t.Fatal(err)
	}
	devs = n.Devices(t) // b's region now holds NewAFU
	pristine, err := os.ReadFile(filepath.Join(n.DataDir, checkpoint.FileName))
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
	dir := damageDir(t)
	cases := damages(pristine)
	if testing.Short() {
		cases = sampleDamages(cases)
	}
	quiet := klog.NewContext(ctx, klog.Background().V(100))
	detected := 0
	for _, d := range cases {
		for p, spec := range specs {
			if err := os.WriteFile(p, spec, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(dir, checkpoint.FileName)
		if err := os.WriteFile(path, d.do(append([]byte(nil), pristine...)), 0o600); err != nil {
			t.Fatal(err)
		}
		st, warning, err := state.New(quiet, state.Config{CheckpointPath: path, CDI: n.CDI, Programmable: true})
		if err != nil {
			t.Fatalf("%s: the driver does not start: %v", d.name, err)
		}
		report, err := st.Restore(quiet, devs)
		if err != nil {
			t.Fatalf("%s: restore: %v", d.name, err)
		}
		if warning != nil {
			detected++
			if !errors.Is(warning, checkpoint.ErrCorrupt) || report.Damage == "" {
				t.Fatalf("%s: damage not reported: warning %v, report %+v", d.name, warning, report)
			}
		}
		holds := st.Holders()
		for i, h := range []state.Holder{a, b} {
			if got := holds[ports[i].DeviceName()]; got != h.UID {
				t.Fatalf("%s: device %s is held by %q after the restart, want %s (recovered %v, warning %v)", d.name, ports[i].DeviceName(), got, h.UID, report.Recovered, warning)
			}
			if rec, _ := st.Claim(h.UID); rec.Phase != state.PhaseCompleted {
				t.Fatalf("%s: %s is %q after the restart, want %s (recovered %v, warning %v)", d.name, h.UID, rec.Phase, state.PhaseCompleted, report.Recovered, warning)
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
		cleanAfterDamage(t, n.CDI, specs, path)
	}
	t.Logf("%d kinds of damage, %d detected as such (the rest hit bytes no reader uses)", len(cases), detected)
	if detected == 0 {
		t.Fatal("no damage was detected")
	}
}

// damageDir returns a directory for the damaged checkpoints: on a tmpfs,
// which keeps the thousands of restarts quick, when there is one; the
// checkpoint code is the same.
func damageDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err = os.MkdirTemp("/dev/shm", "fdra-damage-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return dir
}

// sampleDamages returns about 200 of cases, spread evenly, for -short.
func sampleDamages(cases []damage) []damage {
	var some []damage
	for i := 0; i < len(cases); i += max(1, len(cases)/200) {
		some = append(some, cases[i])
	}
	return some
}

// cleanAfterDamage keeps the next case's CDI directory to the specs kept
// in specs and removes the checkpoints set aside beside path.
func cleanAfterDamage(t *testing.T, w *cdi.Writer, specs map[string][]byte, path string) {
	t.Helper()
	for _, uid := range mustList(t, w) {
		if p := w.SpecPath(uid); specs[p] == nil {
			os.Remove(p)
		}
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) > 0 {
		for _, f := range aside {
			os.Remove(f)
		}
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

// damageNewestSlot flips a byte of the checksum of the newest slot of the
// checkpoint at path: the older slot is read instead.
func damageNewestSlot(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	half := len(b) / 2
	newest := 0
	if binary.LittleEndian.Uint64(b[half+8:]) > binary.LittleEndian.Uint64(b[8:]) {
		newest = half
	}
	b[newest+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedCheckpointKeepsClaimsPrepared: a claim whose region was
// programmed and whose CDI spec was handed out stays prepared through a
// damaged checkpoint, whether the older save had it only started or the
// checkpoint lost it altogether: its next prepare programs nothing (a
// container may use the region), and the start after, with the rewritten
// checkpoint sound, keeps its spec. A spec naming a device the checkpoint
// gives another claim is kept, reported and not used.
func TestDamagedCheckpointKeepsClaimsPrepared(t *testing.T) {
	loseBoth := func(t *testing.T, path string) {
		if err := os.WriteFile(path, []byte("\x00garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		// reset loads another AFU into the region before the restart
		// (the region was reset, or the node rebooted): the spec's AFU
		// is no longer there, and the next prepare programs it again.
		reset bool
	}{
		{"older save has it started", damageNewestSlot, false},
		{"both saves lost", loseBoth, false},
		{"both saves lost and the region reset", loseBoth, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
			devs := n.Devices(t)
			dev := devs.Ports()[0].DeviceName()
			a := holder("a")
			req := request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways))
			ctx := context.Background()
			if _, err := n.State.Prepare(ctx, a, req, devs); err != nil {
				t.Fatal(err)
			}
			tc.damage(t, filepath.Join(n.DataDir, checkpoint.FileName))
			if tc.reset {
				_, port, err := n.Sim.Port(devs.Ports()[0].Node.Name)
				if err != nil {
					t.Fatal(err)
				}
				if err := n.Sim.SetAFUID(port, simnode.DefaultAFUID); err != nil {
					t.Fatal(err)
				}
			}

			damaged := testnode.New(t, testnode.Options{Restart: n})
			if damaged.StateWarning == nil || len(damaged.Restored.Recovered) != 1 || damaged.Restored.Recovered[0].UID != a.UID {
				t.Fatalf("start on the damaged checkpoint: warning %v, recovered %v; want the damage reported and %s recovered", damaged.StateWarning, damaged.Restored.Recovered, a.UID)
			}
			if _, err := damaged.State.Prepare(ctx, a, req, damaged.Devices(t)); err != nil {
				t.Fatalf("prepare of %s again: %v", a.UID, err)
			}
			if c, want := damaged.Programmer.TotalCalls(), map[bool]int{false: 0, true: 1}[tc.reset]; c != want {
				t.Errorf("the region of prepared claim %s was programmed %d times after the damaged start, want %d", a.UID, c, want)
			}

			sound := testnode.New(t, testnode.Options{Restart: damaged})
			if sound.StateWarning != nil || len(sound.Restored.Removed) != 0 {
				t.Errorf("start after the recovery: warning %v, removed specs %v", sound.StateWarning, sound.Restored.Removed)
			}
			if ok, err := sound.CDI.ClaimSpecExists(string(a.UID)); err != nil || !ok {
				t.Errorf("CDI spec of %s after the start that followed the recovery: exists %v, %v", a.UID, ok, err)
			}
			if got := sound.State.Holders()[dev]; got != a.UID {
				t.Errorf("device %s is held by %q, want %s", dev, got, a.UID)
			}
		})
	}
}

// TestRecoveryNeverGivesAHeldDevice: with the checkpoint damaged, a CDI
// spec naming a device that the checkpoint's older save gives another
// claim is kept and reported, and the device stays with that claim.
func TestRecoveryNeverGivesAHeldDevice(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	ports := devs.Ports()
	a, b, forged := holder("a"), holder("b"), holder("forged")
	ctx := context.Background()
	for i, h := range []state.Holder{a, b} {
		if _, err := n.State.Prepare(ctx, h, request(ports[i].DeviceName(), nil), devs); err != nil {
			t.Fatal(err)
		}
	}
	// A spec of another claim naming a's device.
	spec, err := os.ReadFile(n.CDI.SpecPath(string(a.UID)))
	if err != nil {
		t.Fatal(err)
	}
	forgedSpec := bytes.ReplaceAll(spec, []byte(a.UID), []byte(forged.UID))
	if err := os.WriteFile(n.CDI.SpecPath(string(forged.UID)), forgedSpec, 0o644); err != nil {
		t.Fatal(err)
	}
	damageNewestSlot(t, filepath.Join(n.DataDir, checkpoint.FileName))

	r := testnode.New(t, testnode.Options{Restart: n})
	if got := r.State.Holders()[ports[0].DeviceName()]; got != a.UID {
		t.Errorf("device %s is held by %q after the recovery, want %s", ports[0].DeviceName(), got, a.UID)
	}
	if len(r.Restored.Kept) != 1 || !strings.Contains(r.Restored.Kept[0].Error(), string(forged.UID)) {
		t.Errorf("kept specs %v, want the one of %s reported", r.Restored.Kept, forged.UID)
	}
	if _, ok := r.State.Claim(forged.UID); ok {
		t.Errorf("%s has a record after the recovery", forged.UID)
	}
	if ok, err := r.CDI.ClaimSpecExists(string(forged.UID)); err != nil || !ok {
		t.Errorf("spec of %s after the recovery: exists %v, %v; want it kept", forged.UID, ok, err)
	}
	if got := r.State.Holders()[ports[1].DeviceName()]; got != b.UID {
		t.Errorf("device %s is held by %q after the recovery, want %s", ports[1].DeviceName(), got, b.UID)
	}
	// The kubelet's unprepare of the kept spec's claim removes the spec
	// and nothing else.
	if err := r.State.Unprepare(ctx, forged.UID); err != nil {
		t.Fatalf("unprepare of %s: %v", forged.UID, err)
	}
	if ok, err := r.CDI.ClaimSpecExists(string(forged.UID)); err != nil || ok {
		t.Errorf("spec of %s after its unprepare: exists %v, %v; want it removed", forged.UID, ok, err)
	}
	if ok, err := r.CDI.ClaimSpecExists(string(a.UID)); err != nil || !ok || r.State.Holders()[ports[0].DeviceName()] != a.UID {
		t.Errorf("after the unprepare of %s: spec of %s exists %v (%v), device %s held by %q", forged.UID, a.UID, ok, err, ports[0].DeviceName(), r.State.Holders()[ports[0].DeviceName()])
	}
}

// TestStaleSpecNeverCompletesAFailedPrepare: a claim prepared again after
// a reboot, whose programming fails, has no CDI spec (its old one went
// with its completed record); when the checkpoint is then damaged, nothing
// (no spec whose AFU the region no longer holds) makes the claim look
// prepared.
func TestStaleSpecNeverCompletesAFailedPrepare(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	dev0, dev1 := devs.Ports()[0].DeviceName(), devs.Ports()[1].DeviceName()
	a, b := holder("a"), holder("b")
	req := request(dev0, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways))
	ctx := context.Background()
	if _, err := n.State.Prepare(ctx, a, req, devs); err != nil {
		t.Fatal(err)
	}
	reboot(t, n, devs.Ports()[0])
	rebooted := testnode.New(t, testnode.Options{Restart: n, Programmer: &program.SimProgrammer{FailDevices: []string{dev0}}})
	if _, err := rebooted.State.Prepare(ctx, a, req, rebooted.Devices(t)); err == nil {
		t.Fatal("prepare after the reboot succeeded with a failing programmer")
	}
	checkConsistent(t, rebooted)
	if _, err := rebooted.State.Prepare(ctx, b, request(dev1, nil), rebooted.Devices(t)); err != nil {
		t.Fatal(err)
	}
	damageNewestSlot(t, filepath.Join(n.DataDir, checkpoint.FileName))

	r := testnode.New(t, testnode.Options{Restart: rebooted})
	if rec, _ := r.State.Claim(a.UID); rec.Phase == state.PhaseCompleted {
		t.Errorf("%s is completed after the damaged start, though its last programming failed (kept %v)", a.UID, r.Restored.Kept)
	}
	out, err := r.State.Prepare(ctx, a, req, r.Devices(t))
	if err == nil && afuID(t, r, dev0) != testnode.NewAFU {
		t.Errorf("prepare of %s answered %+v, but the region holds %s", a.UID, out.Devices, afuID(t, r, dev0))
	}
}

// TestRecoveredClaimKeepsItsRequests: a claim rebuilt from its CDI spec
// alone (the spec has no request names) is answered with the request
// names of the kubelet's prepare, so the kubelet hands its devices to the
// containers that asked.
func TestRecoveredClaimKeepsItsRequests(t *testing.T) {
	a := holder("a")
	n, dev := preparedNode(t, a, nil)
	ctx := context.Background()
	if err := os.WriteFile(filepath.Join(n.DataDir, checkpoint.FileName), []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := testnode.New(t, testnode.Options{Restart: n})
	out, err := r.State.Prepare(ctx, a, request(dev, nil), r.Devices(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Devices) != 1 || !slices.Equal(out.Devices[0].Requests, []string{"fpga"}) {
		t.Errorf("prepare after the recovery answered %+v, want device %s for request fpga", out.Devices, dev)
	}
}

// TestSpecOutranksAStartedRecord: the older save has claim x only started
// on a device; the lost newest save had x unprepared and y prepared on
// it. y's spec wins: the device is y's (its container uses it), x's stale
// record gives way, as the kubelet never unprepares x again.
func TestSpecOutranksAStartedRecord(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	x, y := holder("x"), holder("y")
	ctx := context.Background()
	n.Programmer.FailDevices = []string{dev}
	if _, err := n.State.Prepare(ctx, x, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); err == nil {
		t.Fatal("prepare of x succeeded with a failing programmer")
	}
	state.BreakCheckpointWrites(n.State)
	if err := n.State.Unprepare(ctx, x.UID); err == nil {
		t.Fatal("unprepare of x answered while no checkpoint write succeeds")
	}
	if err := state.HealCheckpointWrites(n.State); err != nil {
		t.Fatal(err)
	}
	if _, err := n.State.Prepare(ctx, y, request(dev, nil), devs); err != nil {
		t.Fatal(err)
	}
	if err := n.State.Unprepare(ctx, x.UID); err != nil {
		t.Fatalf("the kubelet's retried unprepare of x: %v", err)
	}
	damageNewestSlot(t, filepath.Join(n.DataDir, checkpoint.FileName))

	r := testnode.New(t, testnode.Options{Restart: n})
	if got := r.State.Holders()[dev]; got != y.UID {
		t.Errorf("device %s is held by %q after the recovery, want %s (kept %v)", dev, got, y.UID, r.Restored.Kept)
	}
	if _, ok := r.State.Claim(x.UID); ok {
		t.Errorf("%s, unprepared before the damage, still has a record", x.UID)
	}
}

// TestSpecNamingFewerDevicesFreesTheRest: the older slot has a claim
// started on two devices, its spec (from the newer, lost save) completed
// on one of them: the recovered record holds that one only, and the
// device the spec drops is free for another claim.
func TestSpecNamingFewerDevicesFreesTheRest(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}})
	devs := n.Devices(t)
	kept, dropped := devs.Ports()[0].DeviceName(), devs.Ports()[1].DeviceName()
	x, y := holder("x"), holder("y")
	ctx := context.Background()
	n.Programmer.FailDevices = []string{dropped}
	cfg := ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)
	both := append(request(kept, cfg), request(dropped, cfg)...)
	if _, err := n.State.Prepare(ctx, x, both, devs); err == nil {
		t.Fatal("prepare of x succeeded with a failing programmer")
	}
	if rec, ok := n.State.Claim(x.UID); !ok || rec.Phase != state.PhaseStarted || len(rec.Devices) != 2 {
		t.Fatalf("record of x after the failed prepare: %+v, want started on both devices", rec)
	}
	// Another allocation of x, on the programmed device alone.
	if _, err := n.State.Prepare(ctx, x, request(kept, ask(testnode.NewAFU, v1alpha1.ProgrammingNever)), devs); err != nil {
		t.Fatal(err)
	}
	damageNewestSlot(t, filepath.Join(n.DataDir, checkpoint.FileName))

	r := testnode.New(t, testnode.Options{Restart: n})
	if len(r.Restored.Recovered) != 1 || r.Restored.Recovered[0].UID != x.UID {
		t.Fatalf("recovered %v, want %s from its spec (kept %v)", r.Restored.Recovered, x.UID, r.Restored.Kept)
	}
	rec, ok := r.State.Claim(x.UID)
	if !ok || rec.Phase != state.PhaseCompleted || len(rec.Devices) != 1 || rec.Devices[0].Device != kept {
		t.Fatalf("recovered record of x: %+v, want completed on %s alone", rec, kept)
	}
	holders := r.State.Holders()
	if holders[kept] != x.UID {
		t.Errorf("device %s is held by %q, want %s", kept, holders[kept], x.UID)
	}
	if h, held := holders[dropped]; held {
		t.Errorf("device %s, which the spec drops, is still held by %s", dropped, h)
	}
	if _, err := r.State.Prepare(ctx, y, request(dropped, nil), r.Devices(t)); err != nil {
		t.Fatalf("prepare of another claim on the dropped device: %v", err)
	}
	checkConsistent(t, r)
}

// TestDamageSurvivesAKillBeforeRecovery: the daemon that finds the
// checkpoint damaged is killed before Restore recorded what it recovered
// from the CDI specs. The start after must still see the damage: a
// checkpoint that looks sound would have the lost claim's spec removed
// and its device handed to another claim.
func TestDamageSurvivesAKillBeforeRecovery(t *testing.T) {
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 1}})
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a := holder("a")
	ctx := context.Background()
	if _, err := n.State.Prepare(ctx, a, request(dev, ask(testnode.NewAFU, v1alpha1.ProgrammingAlways)), devs); err != nil {
		t.Fatal(err)
	}
	damageNewestSlot(t, filepath.Join(n.DataDir, checkpoint.FileName))

	killed := testnode.New(t, testnode.Options{Restart: n, NoRestore: true})
	if killed.StateWarning == nil {
		t.Fatal("the damage was not reported")
	}
	next := testnode.New(t, testnode.Options{Restart: killed})
	if next.StateWarning == nil || len(next.Restored.Removed) != 0 {
		t.Errorf("start after a kill before the recovery was recorded: warning %v, removed specs %v; want the damage reported and no spec removed", next.StateWarning, next.Restored.Removed)
	}
	if ok, err := next.CDI.ClaimSpecExists(string(a.UID)); err != nil || !ok {
		t.Errorf("CDI spec of prepared claim %s: exists %v, %v", a.UID, ok, err)
	}
	if got := next.State.Holders()[dev]; got != a.UID {
		t.Errorf("device %s is held by %q, want %s", dev, got, a.UID)
	}
	if _, err := next.State.Prepare(ctx, holder("b"), request(dev, nil), next.Devices(t)); !errors.Is(err, state.ErrDeviceHeld) {
		t.Errorf("another claim on prepared claim %s's device: %v", a.UID, err)
	}
}
