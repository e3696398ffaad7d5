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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/adminapi"
	"github.com/fpga-dra/fpga-dra-driver/internal/deviceplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

const attrs = `device.attributes["` + driverName + `"]`

// deviceClass creates (or replaces) a DeviceClass of this driver with an
// extra CEL condition.
func deviceClass(t testing.TB, name, cel string) {
	t.Helper()
	ctx := context.Background()
	expr := fmt.Sprintf("device.driver == %q", driverName)
	if cel != "" {
		expr += " && " + cel
	}
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}},
	}
	_ = cluster.Client.ResourceV1().DeviceClasses().Delete(ctx, name, metav1.DeleteOptions{})
	if _, err := cluster.Client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func opaque(t testing.TB, cfg any) []resourceapi.DeviceClaimConfiguration {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: runtime.RawExtension{Raw: b}},
	}}}
}

func fpgaConfig(c v1alpha1.FpgaConfig) v1alpha1.FpgaConfig {
	c.APIVersion, c.Kind = v1alpha1.SchemeGroupVersion.String(), v1alpha1.FpgaConfigKind
	return c
}

// claimTemplate creates a ResourceClaimTemplate asking for one device of
// class with optional configs.
func claimTemplate(t testing.TB, ns, name, class string, configs []resourceapi.DeviceClaimConfiguration) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
			Config:   configs,
		}}},
	}
	if _, err := cluster.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// probePod creates a pod running the probe with a claim from template.
func probePod(t testing.TB, ns, name, template string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "fpga", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{
				Name: "probe", Image: localcluster.ProbeImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "fpga"}}},
			}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runningProbe waits for the pod and returns what its container saw, and
// the device its claim got.
func runningProbe(t testing.TB, ns, name string) (*localcluster.ProbeView, string, *resourceapi.ResourceClaim) {
	t.Helper()
	ctx := context.Background()
	pod, err := cluster.WaitPodRunning(ctx, ns, name, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	view, err := cluster.ReadProbe(ctx, pod, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	claim := podClaim(t, pod)
	var device string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == driverName {
			device = r.Device
		}
	}
	return view, device, claim
}

func podClaim(t testing.TB, pod *corev1.Pod) *resourceapi.ResourceClaim {
	t.Helper()
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			c, err := cluster.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(context.Background(), *s.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatalf("pod %s has no generated claim", pod.Name)
	return nil
}

// fpgaDevices lists the FPGA nodes the container got.
func fpgaDevices(v *localcluster.ProbeView) []string {
	var out []string
	for d := range v.Devices {
		if strings.HasPrefix(d, "/dev/dfl-") || strings.HasPrefix(d, "/dev/intel-fpga-") {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

// deviceOf is the name the driver publishes a simulated port under.
func deviceOf(p *simnode.Port) string {
	return fmt.Sprintf("fpga-%s-p%d", strings.NewReplacer(":", "-", ".", "-").Replace(p.PCIAddress), p.ID)
}

// portOf maps a published device name to the simulated port.
func portOf(t testing.TB, device string) *simnode.Port {
	t.Helper()
	for _, c := range node.Sim.Cards {
		for _, p := range c.Ports {
			if deviceOf(p) == device {
				return p
			}
		}
	}
	t.Fatalf("no simulated port is published as %s", device)
	return nil
}

func sliceAFU(ctx context.Context, device string) string {
	slices, _ := nodeSlices(ctx)
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if v := d.Attributes[driverName+"/afuID"].StringValue; d.Name == device && v != nil {
				return *v
			}
		}
	}
	return ""
}

// eventually polls cond (state owned by other processes) until it holds.
func eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func Test1SlicesMatchTreeAndHotplug(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	got, err := nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	sort.Strings(names)
	want := []string{"fpga-0000-01-00-0-p0", "fpga-0000-02-00-0-p0", "fpga-0000-03-00-0-p0", "fpga-0000-04-00-0-p0"}
	if !slices.Equal(names, want) {
		t.Fatalf("published %v, want %v", names, want)
	}
	card, err := node.Sim.AddCard()
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Uevent("add", card.Ports[0].SysfsPath, "dfl"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "hot-plugged card published", 30*time.Second, func() bool {
		return sliceAFU(ctx, "fpga-0000-05-00-0-p0") == simnode.DefaultAFUID
	})
}

func Test2LoadedAFU(t *testing.T) {
	requireCluster(t)
	ns := namespace(t, "e2e-af")
	deviceClass(t, "e2e-af-second", fmt.Sprintf("%s.afuID == %q", attrs, simnode.SecondAFUID))
	claimTemplate(t, ns, "af", "e2e-af-second", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SecondAFUID, Programming: v1alpha1.ProgrammingNever})))
	probePod(t, ns, "af", "af")
	view, device, _ := runningProbe(t, ns, "af")
	port := portOf(t, device)
	if got, want := fpgaDevices(view), []string{"/dev/" + port.Name}; !slices.Equal(got, want) {
		t.Fatalf("container sees FPGA nodes %v, want exactly %v (never an FME, never another port)", got, want)
	}
	if got, want := view.Devices["/dev/"+port.Name], fmt.Sprintf("%d:%d", simnode.MajorDFLPort, port.Minor); got != want {
		t.Errorf("port node numbers %s, want %s", got, want)
	}
	for k, want := range map[string]string{
		"FPGA_PORTS": "/dev/" + port.Name, "FPGA_AFU_IDS": simnode.SecondAFUID,
		"FPGA_INTERFACE_IDS": simnode.DefaultInterfaceID, "ACCELERATOR_UNITS": port.PCIAddress,
	} {
		if view.Env[k] != want {
			t.Errorf("env %s=%q, want %q", k, view.Env[k], want)
		}
	}
}

func Test3ProgramRegion(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-program")
	deviceClass(t, "e2e-region", fmt.Sprintf("%s.interfaceID == %q && %s.programmable", attrs, simnode.DefaultInterfaceID, attrs))
	claimTemplate(t, ns, "region", "e2e-region", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleAFUID})))
	probePod(t, ns, "program", "region")
	view, device, _ := runningProbe(t, ns, "program")
	if view.Env["FPGA_AFU_IDS"] != simnode.SampleAFUID {
		t.Fatalf("container sees AFU %q, want the programmed %s", view.Env["FPGA_AFU_IDS"], simnode.SampleAFUID)
	}
	if b, err := os.ReadFile(filepath.Join(portOf(t, device).SysfsPath, "afu_id")); err != nil || strings.TrimSpace(string(b)) != simnode.SampleAFUID {
		t.Fatalf("region afu_id %q (%v), want %s", b, err, simnode.SampleAFUID)
	}
	eventually(t, "slice afuID republished", 30*time.Second, func() bool { return sliceAFU(ctx, device) == simnode.SampleAFUID })
}

func Test4CompetingPods(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-compete")
	deviceClass(t, "e2e-one", `device.attributes["resource.kubernetes.io"].pciBusID == "0000:04:00.0"`)
	claimTemplate(t, ns, "one", "e2e-one", nil)
	probePod(t, ns, "first", "one")
	_, device, firstClaim := runningProbe(t, ns, "first")
	if device != "fpga-0000-04-00-0-p0" {
		t.Fatalf("first pod got %s", device)
	}
	probePod(t, ns, "second", "one")
	eventually(t, "second pod unschedulable while the device is taken", 60*time.Second, func() bool {
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	spec := filepath.Join(cluster.CDIDir, fmt.Sprintf("%s-port_%s.json", driverName, firstClaim.UID))
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("CDI spec of the running pod's claim: %v", err)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, device2, _ := runningProbe(t, ns, "second")
	if device2 != device {
		t.Fatalf("second pod got %s, want %s", device2, device)
	}
	eventually(t, "unprepare removed the first claim's CDI spec", 30*time.Second, func() bool {
		_, err := os.Stat(spec)
		return os.IsNotExist(err)
	})
}

// programmedEvents counts Programmed events on a claim.
func programmedEvents(t testing.TB, claim *resourceapi.ResourceClaim) int {
	t.Helper()
	return len(claimEvents(t, claim, func(e eventsv1.Event) bool { return e.Reason == "Programmed" }))
}

// claimEvents returns the notes of the events about claim that match.
func claimEvents(t testing.TB, claim *resourceapi.ResourceClaim, match func(eventsv1.Event) bool) []string {
	t.Helper()
	list, err := cluster.Client.EventsV1().Events(claim.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.UID == claim.UID && match(e) {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

func Test5Restarts(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-restart")
	deviceClass(t, "e2e-restart", fmt.Sprintf(`%s.interfaceID == %q && device.attributes["resource.kubernetes.io"].pciBusID == "0000:02:00.0"`, attrs, simnode.DefaultInterfaceID))
	deviceClass(t, "e2e-restart-any", fmt.Sprintf(`%s.afuID == %q`, attrs, simnode.DefaultAFUID))
	claimTemplate(t, ns, "program", "e2e-restart", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleAFUID})))
	claimTemplate(t, ns, "any", "e2e-restart-any", nil)
	probePod(t, ns, "long", "program")
	_, _, claim := runningProbe(t, ns, "long")
	eventually(t, "Programmed event", 30*time.Second, func() bool { return programmedEvents(t, claim) == 1 })

	if err := node.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	probePod(t, ns, "after-driver-restart", "any")
	runningProbe(t, ns, "after-driver-restart")
	if p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, "long", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod stopped running across a driver restart: %v %v", p.Status.Phase, err)
	}
	if n := programmedEvents(t, claim); n != 1 {
		t.Fatalf("region programmed %d times, want once (no reprogramming on driver restart)", n)
	}

	if err := cluster.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	probePod(t, ns, "after-kubelet-restart", "any")
	runningProbe(t, ns, "after-kubelet-restart")
	if n := programmedEvents(t, claim); n != 1 {
		t.Fatalf("region programmed %d times after a kubelet restart, want once", n)
	}
}

func Test6UnderstandableFailures(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	ns := namespace(t, "e2e-fail")
	deviceClass(t, "e2e-fail", fmt.Sprintf("%s.interfaceID == %q", attrs, simnode.DefaultInterfaceID))
	badConfig := []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
		Driver: driverName, Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"not-an-id"}`)},
	}}}}
	claimTemplate(t, ns, "bad-config", "e2e-fail", badConfig)
	claimTemplate(t, ns, "bad-sha", "e2e-fail", opaque(t, fpgaConfig(v1alpha1.FpgaConfig{AFUID: simnode.SampleAFUID, SHA256: strings.Repeat("0", 64)})))
	for _, tc := range []struct{ pod, template, want string }{
		{"bad-config", "bad-config", "afuID"},
		{"bad-sha", "bad-sha", "checksum"},
	} {
		probePod(t, ns, tc.pod, tc.template)
		eventually(t, tc.pod+": an event says why", 60*time.Second, func() bool {
			return strings.Contains(cluster.Events(ctx, ns, tc.pod), tc.want)
		})
		p, err := cluster.Client.CoreV1().Pods(ns).Get(ctx, tc.pod, metav1.GetOptions{})
		if err != nil || p.Status.Phase == corev1.PodRunning {
			t.Fatalf("%s: pod runs despite a bad claim (%v)", tc.pod, err)
		}
	}
}

// waitNoPods waits until the e2e namespaces hold no pods, so that every
// claim was unprepared by the DRA driver before it goes away.
func waitNoPods(t testing.TB) {
	t.Helper()
	eventually(t, "e2e pods gone", 120*time.Second, func() bool {
		pods, err := cluster.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Namespace, "e2e-") {
				return false
			}
		}
		return true
	})
}

// Test7DevicePluginMode runs the same node in legacy device-plugin mode: a
// pod asking for the af resource by its Intel-compatible name runs and sees
// exactly its port. The driver returns to DRA mode afterwards.
func Test7DevicePluginMode(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	waitNoPods(t)
	// fpga.dra.dev/af-<if[:3]>.<afu[:3]>.<base64url(if+afu)> for DefaultAFUID.
	const resource = driverName + "/af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
	node.Stop()
	if err := node.StartDevicePlugin(ctx, resource); err != nil {
		t.Fatal(err)
	}
	inDRA := false
	t.Cleanup(func() {
		if inDRA {
			return
		}
		node.Stop()
		if err := node.Start(context.Background()); err != nil {
			t.Errorf("back to DRA mode: %v", err)
		}
	})
	ns := namespace(t, "e2e-legacy")
	_, view := runResourcePod(t, ns, "legacy", resource)
	devs := fpgaDevices(view)
	if len(devs) != 1 || !strings.HasPrefix(devs[0], "/dev/dfl-port.") {
		t.Fatalf("container sees FPGA nodes %v, want exactly one port", devs)
	}
	if view.Env["FPGA_AFU_IDS"] != simnode.DefaultAFUID || view.Env["FPGA_PORTS"] != devs[0] {
		t.Fatalf("env %v, want the port %s carrying %s", view.Env, devs[0], simnode.DefaultAFUID)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, "legacy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNoPods(t)

	// Back to DRA. The device-plugin allocation's hold on the port stays
	// until the kubelet's pod-resources API has shown, twice, that no
	// container has the port; then a claim for that very port runs.
	node.Stop()
	inDRA = true
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ctl := adminapi.NewClient(filepath.Join(cluster.KubeletRoot, "plugins", driverName, "control.sock"))
	eventually(t, "the device-plugin hold released in DRA mode", 90*time.Second, func() bool {
		list, err := ctl.List(ctx)
		if err != nil {
			return false
		}
		for _, d := range list.Devices {
			if d.Holder != nil && d.Holder.Namespace == deviceplugin.LegacyNamespace {
				return false
			}
		}
		return true
	})
	deviceClass(t, "e2e-legacy-port", fmt.Sprintf(`device.attributes["resource.kubernetes.io"].pciBusID == %q`, view.Env["ACCELERATOR_UNITS"]))
	claimTemplate(t, ns, "same-port", "e2e-legacy-port", nil)
	probePod(t, ns, "dra", "same-port")
	draView, _, _ := runningProbe(t, ns, "dra")
	if got := fpgaDevices(draView); len(got) != 1 || got[0] != devs[0] {
		t.Fatalf("DRA pod sees %v, want the port %s the device-plugin pod had", got, devs[0])
	}
}

// runResourcePod runs a probe pod whose container asks for one of an
// extended resource, as pod specs written for a device plugin do, and
// returns the running pod and what its container saw.
func runResourcePod(t testing.TB, ns, name, extendedResource string) (*corev1.Pod, *localcluster.ProbeView) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			Containers: []corev1.Container{{
				Name: "probe", Image: localcluster.ProbeImage, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(extendedResource): *resource.NewQuantity(1, resource.DecimalSI)}},
			}},
		},
	}
	if _, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, err := cluster.WaitPodRunning(ctx, ns, name, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	view, err := cluster.ReadProbe(ctx, running, "probe", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return running, view
}
