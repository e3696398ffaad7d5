package draplugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

const (
	dev0 = "fpga-0000-01-00-0-p0" // carries simnode.DefaultAFUID
	dev1 = "fpga-0000-02-00-0-p0" // carries simnode.SecondAFUID
)

// cdiEdits resolves CDI device IDs with the CDI library, as a runtime does,
// and returns the device nodes and env they inject.
func cdiEdits(t *testing.T, dir string, ids []string) (nodes []string, env []string) {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		d := cache.GetDevice(id)
		if d == nil {
			t.Fatalf("CDI device %s not found in %s (errors: %v)", id, dir, cache.GetErrors())
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path+"="+n.HostPath)
		}
		env = append(env, d.GetSpec().ContainerEdits.Env...)
	}
	return nodes, env
}

func TestPrepareAF(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, Programming: v1alpha1.ProgrammingNever}))
	r := pn.prepare(t, dra, c)
	if r.Error != "" {
		t.Fatalf("prepare: %s", r.Error)
	}
	if len(r.Devices) != 1 || r.Devices[0].DeviceName != dev1 || r.Devices[0].PoolName != nodeName || r.Devices[0].RequestNames[0] != "fpga-0" {
		t.Fatalf("devices %+v", r.Devices)
	}
	nodes, env := cdiEdits(t, pn.CDIDir, r.Devices[0].CdiDeviceIds)
	want := "/dev/dfl-port.1=" + filepath.Join(pn.testNode.sim.Root, "dev/dfl-port.1")
	if len(nodes) != 1 || nodes[0] != want {
		t.Fatalf("CDI device nodes %v, want exactly [%s]", nodes, want)
	}
	joined := strings.Join(env, " ")
	for _, e := range []string{"FPGA_PORTS=/dev/dfl-port.1", "FPGA_AFU_IDS=" + simnode.SecondAFUID, "FPGA_INTERFACE_IDS=" + simnode.DefaultInterfaceID, "ACCELERATOR_UNITS=0000:02:00.0"} {
		if !strings.Contains(joined, e) {
			t.Errorf("env %v lacks %s", env, e)
		}
	}
	if n := pn.sim.TotalCalls(); n != 0 {
		t.Fatalf("programmed %d times for a loaded AFU", n)
	}
	// Idempotent: the same answer again, nothing reprogrammed.
	if again := pn.prepare(t, dra, c); again.Error != "" || again.Devices[0].CdiDeviceIds[0] != r.Devices[0].CdiDeviceIds[0] {
		t.Fatalf("second prepare: %+v", again)
	}
	pn.unprepare(t, dra, c)
	if _, err := os.Stat(filepath.Join(pn.CDIDir, "fpga.dra.dev-port_"+string(c.UID)+".json")); !os.IsNotExist(err) {
		t.Fatalf("CDI spec still there after unprepare: %v", err)
	}
	pn.unprepare(t, dra, c) // unknown claim: fine
}

func TestPrepareNeverFailsWhenNotLoaded(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU, Programming: v1alpha1.ProgrammingNever}))
	r := pn.prepare(t, pn.draClient(t), c)
	if !strings.Contains(r.Error, "programming: Never") || !strings.Contains(r.Error, simnode.DefaultAFUID) {
		t.Fatalf("error %q should say the loaded AFU and programming: Never", r.Error)
	}
}

func TestPrepareProgramsRegion(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	r := pn.prepare(t, dra, c)
	if r.Error != "" {
		t.Fatalf("prepare: %s", r.Error)
	}
	if n := pn.sim.TotalCalls(); n != 1 {
		t.Fatalf("programmed %d times, want 1", n)
	}
	_, env := cdiEdits(t, pn.CDIDir, r.Devices[0].CdiDeviceIds)
	if !strings.Contains(strings.Join(env, " "), "FPGA_AFU_IDS="+NewAFU) {
		t.Errorf("env %v does not carry the programmed AFU", env)
	}
	pn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return afuOf(s, dev0) == NewAFU })
	note := pn.waitEvent(t, c, "Programmed")
	if !strings.Contains(note, NewAFU) || !strings.Contains(note, dev0) {
		t.Errorf("Programmed event %q should name the AFU and device", note)
	}
	// IfNeeded: a second claim for the now-loaded AFU is not reprogrammed.
	pn.unprepare(t, dra, c)
	c2 := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	if r := pn.prepare(t, dra, c2); r.Error != "" {
		t.Fatal(r.Error)
	}
	if n := pn.sim.TotalCalls(); n != 1 {
		t.Fatalf("IfNeeded reprogrammed a loaded AFU: %d calls", n)
	}
	// Always does.
	pn.unprepare(t, dra, c2)
	c3 := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU, Programming: v1alpha1.ProgrammingAlways}))
	if r := pn.prepare(t, dra, c3); r.Error != "" {
		t.Fatal(r.Error)
	}
	if n := pn.sim.TotalCalls(); n != 2 {
		t.Fatalf("Always: %d calls, want 2", n)
	}
}

func TestPrepareFailures(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	truncated := writeBitstream(t, pn.RepoDir, "truncated.gbs", simnode.DefaultInterfaceID, "0badc0de0badc0de0badc0de0badc0de")
	if err := os.Truncate(truncated, 30); err != nil {
		t.Fatal(err)
	}
	writeBitstream(t, pn.RepoDir, "other-interface.gbs", "11111111111111111111111111111111", "22222222222222222222222222222222")
	for _, tc := range []struct {
		name   string
		cfg    v1alpha1.FpgaConfig
		want   []string
		reason string
	}{
		{name: "wrong interface ID", cfg: v1alpha1.FpgaConfig{AFUID: NewAFU, InterfaceID: "33333333333333333333333333333333"}, want: []string{"33333333333333333333333333333333", simnode.DefaultInterfaceID}, reason: "PrepareFailed"},
		{name: "missing bitstream", cfg: v1alpha1.FpgaConfig{AFUID: "44444444444444444444444444444444"}, want: []string{"44444444444444444444444444444444", "not found"}, reason: "ProgrammingFailed"},
		{name: "bitstream for another interface", cfg: v1alpha1.FpgaConfig{AFUID: "22222222222222222222222222222222"}, want: []string{"22222222222222222222222222222222", "11111111111111111111111111111111"}, reason: "ProgrammingFailed"},
		{name: "sha256 mismatch", cfg: v1alpha1.FpgaConfig{AFUID: NewAFU, SHA256: strings.Repeat("ab", 32)}, want: []string{"checksum", strings.Repeat("ab", 32)}, reason: "ProgrammingFailed"},
		{name: "truncated GBS", cfg: v1alpha1.FpgaConfig{AFUID: "0badc0de0badc0de0badc0de0badc0de", Bitstream: "truncated.gbs"}, want: []string{"truncated.gbs"}, reason: "ProgrammingFailed"},
		{name: "path outside repository", cfg: v1alpha1.FpgaConfig{AFUID: NewAFU, Bitstream: "a/../../etc/passwd"}, want: []string{"bitstream"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := pn.claim(t, []string{dev0}, fpgaConfig(t, tc.cfg))
			r := pn.prepare(t, dra, c)
			if r.Error == "" {
				t.Fatal("prepare succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.ToLower(r.Error), strings.ToLower(w)) {
					t.Errorf("error %q does not mention %q", r.Error, w)
				}
			}
			if tc.reason != "" {
				pn.waitEvent(t, c, tc.reason)
			}
			pn.unprepare(t, dra, c)
		})
	}
	if n := pn.sim.TotalCalls(); n != 0 {
		t.Fatalf("the programmer was called %d times for refused bitstreams", n)
	}

	t.Run("programming failure", func(t *testing.T) {
		pn.sim.FailNext(errors.New("injected PR error"))
		c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
		r := pn.prepare(t, dra, c)
		if !strings.Contains(r.Error, "injected PR error") {
			t.Fatalf("error %q does not carry the programmer's error", r.Error)
		}
		pn.waitEvent(t, c, "ProgrammingFailed")
		// The kubelet retries; this time programming works.
		if r := pn.prepare(t, dra, c); r.Error != "" {
			t.Fatalf("retry: %s", r.Error)
		}
	})
}

func TestPrepareSlowerThanOneCall(t *testing.T) {
	gate := make(chan struct{})
	sim := &program.SimProgrammer{Gate: gate}
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}, prepareWait: 200 * time.Millisecond, programmer: sim})
	dra := pn.draClient(t)
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	r := pn.prepare(t, dra, c)
	if !strings.Contains(r.Error, "in progress") || len(r.Devices) != 0 {
		t.Fatalf("first call: %+v, want an in-progress error", r)
	}
	// A retry while programming still runs starts nothing new.
	if r := pn.prepare(t, dra, c); !strings.Contains(r.Error, "in progress") {
		t.Fatalf("retry: %+v", r)
	}
	close(gate)
	pn.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return afuOf(s, dev0) == NewAFU })
	r = pn.prepare(t, dra, c)
	if r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("call after programming: %+v", r)
	}
	if n := sim.TotalCalls(); n != 1 {
		t.Fatalf("programmed %d times, want 1", n)
	}
}

func TestPrepareSecondClaimForHeldDevice(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	first := pn.claim(t, []string{dev0})
	if r := pn.prepare(t, dra, first); r.Error != "" {
		t.Fatal(r.Error)
	}
	second := pn.claim(t, []string{dev0})
	r := pn.prepare(t, dra, second)
	if !strings.Contains(r.Error, "already prepared") || !strings.Contains(r.Error, first.Name) {
		t.Fatalf("second claim: %q, want a refusal naming %s", r.Error, first.Name)
	}
	pn.unprepare(t, dra, first)
	if r := pn.prepare(t, dra, second); r.Error != "" {
		t.Fatalf("after the first was unprepared: %s", r.Error)
	}
}

func TestPrepare64ClaimsConcurrently(t *testing.T) {
	// The gate holds every programming until two are in progress at once, so
	// the test proves parallelism without depending on timing: a driver that
	// programs one region at a time never opens it, and its claims fail when
	// the prepare wait runs out.
	gate := make(chan struct{})
	var started atomic.Int32
	sim := &program.SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) {
		if started.Add(1) == 2 {
			close(gate)
		}
	}}
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 64}, programmer: sim})
	dra := pn.draClient(t)
	res := pn.driver.Devices()
	var claims []*resourceapi.ResourceClaim
	for _, p := range res.Ports() {
		claims = append(claims, pn.claim(t, []string{p.DeviceName()}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU})))
	}
	var wg sync.WaitGroup
	errs := make(chan string, len(claims))
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := dra.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{protoClaim(c)}})
			switch {
			case err != nil:
				errs <- err.Error()
			case resp.Claims[string(c.UID)].Error != "":
				errs <- resp.Claims[string(c.UID)].Error
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := pn.sim.TotalCalls(); n != 64 {
		t.Fatalf("programmed %d regions, want 64", n)
	}
	if pn.sim.Overlaps() != 0 {
		t.Fatalf("a region was programmed twice at once")
	}
	if pn.sim.MaxConcurrent() < 2 {
		t.Fatalf("regions were programmed one at a time (max concurrency %d)", pn.sim.MaxConcurrent())
	}
	if h := pn.state.Holders(); len(h) != 64 {
		t.Fatalf("%d devices held, want 64", len(h))
	}
}

func TestRestartBetweenPrepareAndUnprepare(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	first := pn.prepare(t, pn.draClient(t), c)
	if first.Error != "" {
		t.Fatal(first.Error)
	}
	pn.driver.Stop()

	pn2 := startPreparingNode(t, preparingOptions{restart: pn})
	dra := pn2.draClient(t)
	if pn2.stateWarn != nil {
		t.Fatalf("checkpoint warning after a clean restart: %v", pn2.stateWarn)
	}
	// The kubelet re-prepares after a restart: same devices, no programming.
	r := pn2.prepare(t, dra, c)
	if r.Error != "" || r.Devices[0].CdiDeviceIds[0] != first.Devices[0].CdiDeviceIds[0] {
		t.Fatalf("prepare after restart: %+v", r)
	}
	if n := pn2.sim.TotalCalls(); n != 0 {
		t.Fatalf("reprogrammed after a driver restart: %d calls", n)
	}
	other := pn2.claim(t, []string{dev0})
	if r := pn2.prepare(t, dra, other); !strings.Contains(r.Error, "already prepared") {
		t.Fatalf("the restored hold did not refuse another claim: %q", r.Error)
	}
	pn2.unprepare(t, dra, c)
	if _, ok := pn2.state.Claim(c.UID); ok {
		t.Fatal("claim still recorded after unprepare")
	}
	if specs, _ := filepath.Glob(filepath.Join(pn2.CDIDir, "*.json")); len(specs) != 0 {
		t.Fatalf("CDI specs left: %v", specs)
	}
}

func TestRebootReprogramsAndRestoresCDI(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	c := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	if r := pn.prepare(t, pn.draClient(t), c); r.Error != "" {
		t.Fatal(r.Error)
	}
	pn.driver.Stop()
	// A reboot: new boot ID, the CDI tmpfs is empty. The simulated AFU ID
	// is left as programmed, so only the boot ID can tell.
	if err := pn.testNode.sim.SetBootID("00000000-0000-4000-8000-000000000002"); err != nil {
		t.Fatal(err)
	}
	specs, _ := filepath.Glob(filepath.Join(pn.CDIDir, "*.json"))
	for _, s := range specs {
		os.Remove(s)
	}
	pn2 := startPreparingNode(t, preparingOptions{restart: pn})
	if specs, _ := filepath.Glob(filepath.Join(pn2.CDIDir, "*.json")); len(specs) != 1 {
		t.Fatalf("restore wrote %d CDI specs, want 1", len(specs))
	}
	r := pn2.prepare(t, pn2.draClient(t), c)
	if r.Error != "" {
		t.Fatal(r.Error)
	}
	if n := pn2.sim.TotalCalls(); n != 1 {
		t.Fatalf("after a reboot the region was programmed %d times, want 1", n)
	}
	if rec, _ := pn2.state.Claim(c.UID); rec.BootID != "00000000-0000-4000-8000-000000000002" {
		t.Fatalf("record keeps boot ID %q", rec.BootID)
	}
}

func TestCorruptCheckpoint(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	c := pn.claim(t, []string{dev0})
	if r := pn.prepare(t, pn.draClient(t), c); r.Error != "" {
		t.Fatal(r.Error)
	}
	pn.driver.Stop()
	cp := filepath.Join(pn.dataDir, "checkpoint.json")
	b, err := os.ReadFile(cp)
	if err != nil {
		t.Fatal(err)
	}
	// Flip the claim's namespace inside the payload: the checksum no longer
	// matches but the structure still decodes.
	if err := os.WriteFile(cp, []byte(strings.Replace(string(b), `default`, `defauLt`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	pn2 := startPreparingNode(t, preparingOptions{restart: pn})
	if pn2.stateWarn == nil || !strings.Contains(pn2.stateWarn.Error(), "corrupt") {
		t.Fatalf("no loud warning for a corrupt checkpoint: %v", pn2.stateWarn)
	}
	aside, _ := filepath.Glob(cp + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt checkpoint not kept aside: %v", aside)
	}
	// What could be recovered still holds the device.
	other := pn2.claim(t, []string{dev0})
	if r := pn2.prepare(t, pn2.draClient(t), other); !strings.Contains(r.Error, "already prepared") {
		t.Fatalf("recovered hold did not refuse another claim: %q", r.Error)
	}

	// Garbage: nothing in the file to recover, but the claim's CDI spec
	// is evidence of its hold: the driver starts, keeps the claim and its
	// spec, and refuses its device to another claim until the kubelet
	// unprepares it.
	pn2.driver.Stop()
	if err := os.WriteFile(cp, []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	pn3 := startPreparingNode(t, preparingOptions{restart: pn2})
	if pn3.stateWarn == nil {
		t.Fatal("no warning for a garbage checkpoint")
	}
	if got := pn3.Restored.Recovered; len(got) != 1 || got[0].UID != c.UID {
		t.Fatalf("recovered %+v, want claim %s from its CDI spec", got, c.Name)
	}
	if r := pn3.prepare(t, pn3.draClient(t), other); !strings.Contains(r.Error, "is prepared for "+string(c.UID)) {
		t.Fatalf("prepare of another claim on a device the lost checkpoint held: %q, want it refused", r.Error)
	}
	if r := pn3.prepare(t, pn3.draClient(t), c); r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("the recovered claim prepared again: %+v", r)
	}
	pn3.unprepare(t, pn3.draClient(t), c)
	if r := pn3.prepare(t, pn3.draClient(t), other); r.Error != "" {
		t.Fatalf("prepare once the recovered claim was unprepared: %s", r.Error)
	}
}

// TestPinnedDigestOnLoadedAFU: a claim that pins a digest gets exactly that
// file, also where its AFU is loaded already (from a file the driver did not
// load); once the driver loaded it, the same pin does not reprogram.
func TestPinnedDigestOnLoadedAFU(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	b, err := os.ReadFile(filepath.Join(pn.RepoDir, "second.gbs"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	pin := hex.EncodeToString(sum[:])

	wrong := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, SHA256: strings.Repeat("ab", 32)}))
	if r := pn.prepare(t, dra, wrong); !strings.Contains(r.Error, "checksum") {
		t.Fatalf("a wrong pin on a loaded AFU: %q, want a checksum refusal", r.Error)
	}
	pn.unprepare(t, dra, wrong)

	right := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, SHA256: pin}))
	if r := pn.prepare(t, dra, right); r.Error != "" {
		t.Fatal(r.Error)
	}
	if n := pn.sim.TotalCalls(); n != 1 {
		t.Fatalf("programmed %d times, want once to load the pinned file", n)
	}
	pn.unprepare(t, dra, right)
	again := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, SHA256: pin}))
	if r := pn.prepare(t, dra, again); r.Error != "" {
		t.Fatal(r.Error)
	}
	if n := pn.sim.TotalCalls(); n != 1 {
		t.Fatalf("the pinned file was loaded already, yet programmed again (%d calls)", n)
	}
}

// TestPrepareWhileDrainingIsNoFailure: a kubelet's prepare that reaches a
// stopping daemon (its State drains) is refused, so that the kubelet's
// retry reaches the next instance, and the claim gets no PrepareFailed
// event: nothing failed that its owner should see. (An invalid config of
// another claim, refused before the State, marks where the events of the
// first call have been recorded.)
func TestPrepareWhileDrainingIsNoFailure(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	pn.state.Drain()
	c := pn.claim(t, []string{dev0})
	if r := pn.prepare(t, dra, c); !strings.Contains(r.Error, "stopping") {
		t.Fatalf("prepare while draining: %+v, want a refusal saying the driver is stopping", r)
	}
	marker := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{Programming: v1alpha1.ProgrammingAlways}))
	if r := pn.prepare(t, dra, marker); r.Error == "" {
		t.Fatal("prepare of an invalid config succeeded")
	}
	pn.waitEvent(t, marker, "InvalidConfig")
	list, err := pn.client.EventsV1().Events(c.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.UID == c.UID {
			t.Errorf("event %s on the claim refused while draining: %s", e.Reason, e.Note)
		}
	}
}
