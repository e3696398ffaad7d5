package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

const (
	condProgrammed = driverName + "/" + draplugin.ConditionProgrammed
	condFailed     = driverName + "/" + draplugin.ConditionProgrammingFailed
)

// claimLog records every condition the API server stored on the claims
// of a namespace, as a watch sees them.
type claimLog struct {
	mu   sync.Mutex
	seen map[string][]string // claim name -> "device condition=status reason"
}

func watchClaims(t testing.TB, ns string) *claimLog {
	t.Helper()
	w, err := cluster.Client.ResourceV1().ResourceClaims(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	l := &claimLog{seen: map[string][]string{}}
	go func() {
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*resourceapi.ResourceClaim)
			if !ok {
				continue
			}
			l.mu.Lock()
			for _, d := range c.Status.Devices {
				for _, cond := range d.Conditions {
					e := fmt.Sprintf("%s %s=%s %s", d.Device, cond.Type, cond.Status, cond.Reason)
					if !slices.Contains(l.seen[c.Name], e) {
						l.seen[c.Name] = append(l.seen[c.Name], e)
					}
				}
			}
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *claimLog) of(claim string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen[claim])
}

// prepareWarnings lists the Warning events about a pod's and its claim's
// preparation: what a user sees when prepare fails or times out.
func prepareWarnings(t testing.TB, ns string) []string {
	t.Helper()
	list, err := cluster.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Type == corev1.EventTypeWarning && (strings.Contains(e.Reason, "Prepare") || strings.Contains(strings.ToLower(e.Message), "prepare")) {
			out = append(out, fmt.Sprintf("%s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message))
		}
	}
	return out
}

// deviceStatusOf returns the driver's entry of a device in the claim's
// status.
func deviceStatusOf(c *resourceapi.ResourceClaim, device string) *resourceapi.AllocatedDeviceStatus {
	for i, d := range c.Status.Devices {
		if d.Driver == driverName && d.Device == device {
			return &c.Status.Devices[i]
		}
	}
	return nil
}

func conditionTrue(d *resourceapi.AllocatedDeviceStatus, typ string) bool {
	if d == nil {
		return false
	}
	for _, c := range d.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// waitDeviceReady waits until the claim's status shows the device Ready,
// and returns the claim.
func waitDeviceReady(t testing.TB, ns, name, device string) *resourceapi.ResourceClaim {
	t.Helper()
	var claim *resourceapi.ResourceClaim
	eventually(t, "claim "+name+" shows "+device+" Ready", 30*time.Second, func() bool {
		c, err := cluster.Client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		claim = c
		return err == nil && conditionTrue(deviceStatusOf(c, device), "Ready")
	})
	return claim
}

func statusData(t testing.TB, d *resourceapi.AllocatedDeviceStatus) draplugin.DeviceData {
	t.Helper()
	var data draplugin.DeviceData
	if d == nil || d.Data == nil {
		t.Fatalf("device status has no data: %+v", d)
	}
	if err := json.Unmarshal(d.Data.Raw, &data); err != nil {
		t.Fatalf("device status data %s: %v", d.Data.Raw, err)
	}
	return data
}

// bindingConditionsPublished reports whether the node's programmable
// devices carry the binding conditions.
func bindingConditionsPublished(ctx context.Context) (with, without int) {
	list, _ := nodeSlices(ctx)
	for _, s := range list {
		for _, d := range s.Spec.Devices {
			if p := d.Attributes[driverName+"/programmable"].BoolValue; p == nil || !*p {
				continue
			}
			if slices.Contains(d.BindingConditions, condProgrammed) && slices.Contains(d.BindingFailureConditions, condFailed) {
				with++
			} else {
				without++
			}
		}
	}
	return with, without
}

// waitBindingConditions waits until every programmable device carries the
// binding conditions (on) or none does (off).
func waitBindingConditions(t testing.TB, on bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("binding conditions published: %v", on), 60*time.Second, func() bool {
		with, without := bindingConditionsPublished(context.Background())
		if on {
			return with > 0 && without == 0
		}
		return without > 0 && with == 0
	})
}

// deletePod deletes a pod and waits until its generated claim is gone
// (unprepared and deallocated: its device is free again).
func deletePod(t testing.TB, ns, name string) {
	t.Helper()
	ctx := context.Background()
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claim string
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			claim = *s.ResourceClaimName
		}
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod "+name+" and its claim gone", 90*time.Second, func() bool {
		_, perr := cluster.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		_, cerr := cluster.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return perr != nil && (claim == "" || cerr != nil)
	})
}

// nodeDevices lists the devices as the daemon's control socket shows them.
func nodeDevices(t testing.TB) []adminapi.Device {
	t.Helper()
	list, err := adminapi.NewClient(filepath.Join(cluster.KubeletRoot, "plugins", driverName, "control.sock")).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return list.Devices
}

// freeProgrammable lists the programmable devices no claim holds, by name.
func freeProgrammable(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, d := range nodeDevices(t) {
		if d.Holder == nil && d.InterfaceID == simnode.DefaultInterfaceID {
			out = append(out, d.Name)
		}
	}
	sort.Strings(out)
	return out
}

func holderOf(t testing.TB, device string) string {
	t.Helper()
	for _, d := range nodeDevices(t) {
		if d.Name == device && d.Holder != nil {
			return d.Holder.UID
		}
	}
	return ""
}

// Test11ProgrammingBeforeBinding runs the proofs on the real
// cluster with the driver from the chart, in order (each step leaves the
// node as the next expects):
//
//  1. helm upgrade to a new image while a pod holds a programmed region:
//     the pod keeps running, its claim stays held (never unprepared), the
//     slice is never withdrawn, pods are prepared during and after the
//     upgrade; the container reads its device metadata file;
//  2. programming that fails on one region: the scheduler allocates
//     again, elsewhere, and the pod runs; the failure shows as a
//     condition and an event;
//  3. programming longer than the kubelet's 45 s: no prepare error, the
//     claim shows the conditions and data;
//  4. binding conditions off in the API server: the daemon detects it,
//     publishes without them, and the same workload works through the
//     kubelet's prepare; on again, they are back.
func Test11ProgrammingBeforeBinding(t *testing.T) {
	requireCluster(t)
	if !node.FromChart() {
		t.Skip("needs the driver installed from the chart (make images): upgrades are chart upgrades")
	}
	ctx := context.Background()
	ns := namespace(t, "e2e-binding")
	claims := watchClaims(t, ns)
	waitBindingConditions(t, true)
	deviceClass(t, "e2e-bind-region", fmt.Sprintf("%s.interfaceID == %q && %s.programmable", attrs, simnode.DefaultInterfaceID, attrs))
	deviceClass(t, "e2e-bind-default", fmt.Sprintf("%s.afuID == %q", attrs, simnode.DefaultAFUID))
	deviceClass(t, "e2e-bind-second", fmt.Sprintf("%s.afuID == %q", attrs, simnode.SecondAFUID))
	claimTemplate(t, ns, "sample", "e2e-bind-region", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleAFUID})))
	claimTemplate(t, ns, "reprogram", "e2e-bind-region", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID})))
	claimTemplate(t, ns, "slow", "e2e-bind-region", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: localcluster.SlowAFUID})))
	claimTemplate(t, ns, "default", "e2e-bind-default", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.DefaultAFUID, Programming: v1alpha1.ProgrammingNever})))
	claimTemplate(t, ns, "second", "e2e-bind-second", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, Programming: v1alpha1.ProgrammingNever})))
	restoreRegionsAtEnd(t)
	failing := upgradeWithRegionInUse(t, ctx, ns, claims)
	programmingFailsOnFirstRegion(t, ns, claims, failing)
	programmingLongerThanKubelet(t, ctx, ns)
	bindingConditionsOff(t, ctx, ns)
}

// restoreRegionsAtEnd records the regions' functions and registers cleanups
// that put them back and restore the chart values.
func restoreRegionsAtEnd(t *testing.T) {
	// The regions' functions as the other tests expect them, put back at
	// the end (after the pods are gone, before the daemon restarts).
	loaded := map[*simnode.Port]string{}
	for _, c := range node.Sim.Cards {
		for _, p := range c.Ports {
			b, err := os.ReadFile(filepath.Join(p.SysfsPath, "afu_id"))
			if err != nil {
				t.Fatal(err)
			}
			loaded[p] = strings.TrimSpace(string(b))
		}
	}
	t.Cleanup(func() {
		// Back to the cluster's values; the restart also ends the
		// quarantine of the region that failed, and the new daemon
		// reads the regions afresh.
		wait, err := node.UpgradeChart(context.Background(), "", "{}")
		if err == nil {
			err = wait(context.Background())
		}
		if err != nil {
			t.Errorf("restore the chart values: %v", err)
			return
		}
		for p, afu := range loaded {
			device := deviceOf(p)
			eventually(t, device+" publishes its original AFU again", 30*time.Second, func() bool { return sliceAFU(context.Background(), device) == afu })
		}
	})
	t.Cleanup(func() {
		for p, afu := range loaded {
			if err := node.Sim.SetAFUID(p, afu); err != nil {
				t.Errorf("restore %s: %v", p.Name, err)
			}
		}
	})
}

// upgradeWithRegionInUse upgrades the chart while a programmed region is in
// use and returns the region whose programming the upgraded driver fails.
func upgradeWithRegionInUse(t *testing.T, ctx context.Context, ns string, claims *claimLog) string {
	// 1. Upgrade with a programmed region in use.
	probePod(t, ns, "holder", "sample")
	view, held, holderClaim := runningProbe(t, ns, "holder")
	if view.Env["FPGA_AFU_IDS"] != simnode.SampleAFUID {
		t.Fatalf("holder sees AFU %q, want %s", view.Env["FPGA_AFU_IDS"], simnode.SampleAFUID)
	}
	if got := claims.of(holderClaim.Name); !slices.Contains(got, held+" "+condProgrammed+"=True Programmed") {
		t.Errorf("the holder's claim never showed %s True (Programmed) before binding; seen %v", condProgrammed, got)
	}
	checkMetadata(t, view, held, simnode.SampleAFUID)
	holderPod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "holder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	free := freeProgrammable(t)
	if len(free) < 3 {
		t.Fatalf("free programmable regions %v, want 3 besides the holder's %s", free, held)
	}
	failing := free[0] // the allocator tries devices in the slice's order
	slicesDeleted := watchSliceDeletes(t)
	wait, err := node.UpgradeChart(ctx, "0.1.0-e2e-upgrade", fmt.Sprintf("kubeletPlugin:\n  simulation:\n    programFailDevices: [%s]\n", failing))
	if err != nil {
		t.Fatal(err)
	}
	probePod(t, ns, "during", "default")
	if err := wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, duringDevice, _ := runningProbe(t, ns, "during")
	probePod(t, ns, "after", "second")
	_, afterDevice, _ := runningProbe(t, ns, "after")
	if n := slicesDeleted(); n != 0 {
		t.Errorf("the node's ResourceSlice was deleted %d times during the upgrade; it must stay published", n)
	}
	pod, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "holder", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) != 1 ||
		pod.Status.ContainerStatuses[0].RestartCount != 0 || pod.Status.ContainerStatuses[0].ContainerID != holderPod.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the holder pod did not keep running through the upgrade: %+v", pod.Status)
	}
	if got := holderOf(t, held); got != string(holderClaim.UID) {
		t.Errorf("after the upgrade %s is held by %q, want the holder's claim %s (never unprepared)", held, got, holderClaim.UID)
	}
	if afu := sliceAFU(ctx, held); afu != simnode.SampleAFUID {
		t.Errorf("after the upgrade %s carries %q, want %s still", held, afu, simnode.SampleAFUID)
	}
	t.Logf("upgrade: holder on %s kept running; pods prepared during (%s) and after (%s)", held, duringDevice, afterDevice)
	deletePod(t, ns, "during")
	deletePod(t, ns, "after")
	return failing
}

// programmingFailsOnFirstRegion checks a pod runs on another region when
// programming fails on failing, with the failure on the claim.
func programmingFailsOnFirstRegion(t *testing.T, ns string, claims *claimLog, failing string) {
	// 2. Programming fails on the first region the scheduler picks.
	probePod(t, ns, "retry", "sample")
	_, retryDevice, retryClaim := runningProbe(t, ns, "retry")
	if retryDevice == failing {
		t.Fatalf("the pod runs on %s, whose programming fails", failing)
	}
	if got := claims.of(retryClaim.Name); !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, failing+" "+condFailed+"=True") }) {
		t.Errorf("the claim never showed %s True on %s; seen %v", condFailed, failing, got)
	}
	if ev := claimEvents(t, retryClaim, func(e eventsv1.Event) bool { return e.Reason == "ProgrammingFailed" }); len(ev) == 0 {
		t.Errorf("no ProgrammingFailed event on claim %s", retryClaim.Name)
	}
	t.Logf("failure: %s failed, the scheduler allocated %s; conditions seen %v", failing, retryDevice, claims.of(retryClaim.Name))
}

// programmingLongerThanKubelet checks a claim whose programming outlasts the
// kubelet's prepare timeout ends ready with its status data.
func programmingLongerThanKubelet(t *testing.T, ctx context.Context, ns string) {
	// 3. Programming longer than the kubelet's 45 s.
	probePod(t, ns, "slow", "slow")
	slowPod, err := cluster.WaitPodRunning(ctx, ns, "slow", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slowClaim := podClaim(t, slowPod)
	slowDevice := slowClaim.Status.Allocation.Devices.Results[0].Device
	slowClaim = waitDeviceReady(t, ns, slowClaim.Name, slowDevice)
	if w := prepareWarnings(t, ns); len(w) > 0 {
		t.Errorf("preparation warnings: %v", w)
	}
	st := deviceStatusOf(slowClaim, slowDevice)
	if !conditionTrue(st, condProgrammed) {
		t.Errorf("claim status of %s: %s not True: %+v", slowDevice, condProgrammed, st.Conditions)
	}
	data := statusData(t, st)
	if least, _ := time.ParseDuration(localcluster.SlowProgramming); data.AFUID != localcluster.SlowAFUID || data.InterfaceID != simnode.DefaultInterfaceID ||
		data.ProgrammingSeconds < least.Seconds() || data.ProgrammedAt == nil || data.SHA256 == "" || data.Bitstream == "" {
		t.Errorf("claim status data %+v: want AFU %s, interface %s, programming >= %s, its time, the bitstream and its sha256", data, localcluster.SlowAFUID, simnode.DefaultInterfaceID, localcluster.SlowProgramming)
	}
	if b, err := yaml.Marshal(slowClaim); err == nil {
		t.Logf("the slow claim, as kubectl get resourceclaim -o yaml shows it:\n%s", b)
	}
	for _, p := range []string{"holder", "retry", "slow"} {
		deletePod(t, ns, p)
	}
}

// bindingConditionsOff checks that with binding conditions off in the API
// server the region is programmed in the kubelet's prepare.
func bindingConditionsOff(t *testing.T, ctx context.Context, ns string) {
	// 4. Binding conditions off in the API server.
	wait, err := node.UpgradeChart(ctx, "", "{}")
	if err == nil {
		err = wait(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	setAPIServerBindingConditions(t, false)
	waitBindingConditions(t, false)
	// The first region carries the sample now: Default is programmed
	// in the kubelet's prepare (and the node is as the other tests
	// expect it again).
	probePod(t, ns, "fallback", "reprogram")
	_, fbDevice, fbClaim := runningProbe(t, ns, "fallback")
	fbClaim = waitDeviceReady(t, ns, fbClaim.Name, fbDevice)
	if r := fbClaim.Status.Allocation.Devices.Results[0]; len(r.BindingConditions) != 0 {
		t.Errorf("with the feature off the allocation carries binding conditions %v", r.BindingConditions)
	}
	if data := statusData(t, deviceStatusOf(fbClaim, fbDevice)); data.AFUID != simnode.DefaultAFUID || data.ProgrammingSeconds == 0 {
		t.Errorf("fallback claim data %+v, want AFU %s programmed", data, simnode.DefaultAFUID)
	}
	deletePod(t, ns, "fallback")
	setAPIServerBindingConditions(t, true)
	waitBindingConditions(t, true)
}

// setAPIServerBindingConditions restarts the API server with the
// DRADeviceBindingConditions feature on or off, then the daemon, which
// looks at start whether the API server keeps binding conditions.
func setAPIServerBindingConditions(t testing.TB, on bool) {
	t.Helper()
	ctx := context.Background()
	var extra []string
	if !on {
		extra = []string{"--feature-gates=DRADeviceBindingConditions=false"}
	}
	if err := cluster.RestartAPIServer(ctx, extra...); err != nil {
		t.Fatal(err)
	}
	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// checkMetadata checks the container's metadata file of its FPGA request.
func checkMetadata(t testing.TB, view *localcluster.ProbeView, device, afuID string) {
	t.Helper()
	var paths []string
	for p := range view.Metadata {
		paths = append(paths, p)
	}
	want := filepath.Join(metadata.ContainerDir, "resourceclaimtemplates/fpga/fpga", driverName+"-metadata.json")
	doc, ok := view.Metadata[want]
	if !ok {
		t.Errorf("the container has no %s; it has %v", want, paths)
		return
	}
	var md metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(doc)), &md); err != nil {
		t.Errorf("decode %s: %v\n%s", want, err, doc)
		return
	}
	if len(md.Requests) != 1 || len(md.Requests[0].Devices) != 1 || md.Requests[0].Devices[0].Name != device {
		t.Errorf("metadata names %+v, want request fpga with device %s", md.Requests, device)
		return
	}
	a := md.Requests[0].Devices[0].Attributes
	str := func(k string) string {
		if v := a[resourceapi.QualifiedName(k)].StringValue; v != nil {
			return *v
		}
		return ""
	}
	if str("afuID") != afuID || str("interfaceID") != simnode.DefaultInterfaceID || str("resource.kubernetes.io/pciBusID") == "" || !strings.HasPrefix(str("deviceNodes"), "/dev/dfl-port.") {
		t.Errorf("metadata attributes %v: want afuID %s, interfaceID %s, the PCI address and the device nodes", a, afuID, simnode.DefaultInterfaceID)
	}
}

// watchSliceDeletes counts deletions of the node's ResourceSlices from
// now; the returned func stops and reports.
func watchSliceDeletes(t testing.TB) func() int {
	t.Helper()
	w, err := cluster.Client.ResourceV1().ResourceSlices().Watch(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + cluster.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	deleted := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*resourceapi.ResourceSlice); ok && ev.Type == watch.Deleted && s.Spec.Driver == driverName {
				mu.Lock()
				deleted++
				mu.Unlock()
			}
		}
	}()
	return func() int {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return deleted
	}
}
