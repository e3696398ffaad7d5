package draplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func TestRegistration(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 2}})
	info := n.register(t)
	if info.Type != "DRAPlugin" || info.Name != driverName {
		t.Fatalf("GetInfo: type %q name %q, want DRAPlugin %s", info.Type, info.Name, driverName)
	}
	if !strings.HasSuffix(info.Endpoint, "/dra.sock") {
		t.Errorf("endpoint %q does not name the DRA socket", info.Endpoint)
	}
	for _, want := range []string{drapbv1.DRAPluginService, "v1beta1.DRAPlugin"} {
		if !slices.Contains(info.SupportedVersions, want) {
			t.Errorf("supported versions %v lack %s", info.SupportedVersions, want)
		}
	}
	if st := n.driver.Helper().RegistrationStatus(); st == nil || !st.PluginRegistered {
		t.Errorf("helper did not record the registration: %+v", st)
	}
}

func TestPublishedSlices(t *testing.T) {
	for _, drv := range []discovery.KernelDriver{discovery.DriverDFL, discovery.DriverOPAE} {
		t.Run(string(drv), func(t *testing.T) {
			n := startNode(t, nodeOptions{sim: simnode.Options{Driver: drv, Cards: 2, PortsPerCard: 2}})
			got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 4 })
			if len(got) != 1 {
				t.Fatalf("want 1 slice, got %d", len(got))
			}
			s := got[0]
			if s.Spec.Driver != driverName || s.Spec.NodeName == nil || *s.Spec.NodeName != nodeName || s.Spec.Pool.Name != nodeName {
				t.Fatalf("slice spec driver %q node %v pool %q", s.Spec.Driver, s.Spec.NodeName, s.Spec.Pool.Name)
			}
			res, err := (&discovery.Scanner{Root: n.sim.Root}).Scan()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range res.Ports() {
				d := s.Spec.Devices[i]
				if d.Name != p.DeviceName() {
					t.Errorf("device %d is %s, want %s", i, d.Name, p.DeviceName())
				}
				attr := func(name string) resourceapi.DeviceAttribute {
					return d.Attributes[resourceapi.QualifiedName(driverName+"/"+name)]
				}
				if v := attr(deviceslice.AttrAFUID).StringValue; v == nil || *v != p.AFUID {
					t.Errorf("%s afuID %v, want %s", d.Name, v, p.AFUID)
				}
				if v := attr(deviceslice.AttrInterfaceID).StringValue; v == nil || *v != simnode.DefaultInterfaceID {
					t.Errorf("%s interfaceID %v", d.Name, v)
				}
				if v := attr(deviceslice.AttrKernelDriver).StringValue; v == nil || *v != string(drv) {
					t.Errorf("%s kernelDriver %v", d.Name, v)
				}
				if v := attr("portID").IntValue; v == nil || *v != int64(p.ID) {
					t.Errorf("%s portID %v, want %d", d.Name, v, p.ID)
				}
				if v := d.Attributes["resource.kubernetes.io/pciBusID"].StringValue; v == nil || *v != p.PCIAddress {
					t.Errorf("%s pciBusID %v, want %s", d.Name, v, p.PCIAddress)
				}
				if v := d.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; v == nil || !strings.HasPrefix(*v, "pci0000:") {
					t.Errorf("%s pcieRoot %v", d.Name, v)
				}
				if len(d.Taints) != 0 {
					t.Errorf("healthy device %s has taints %v", d.Name, d.Taints)
				}
			}
		})
	}
}

func TestHotplugRepublishes(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 1}})
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 1 })
	c, err := n.sim.AddCard()
	if err != nil {
		t.Fatal(err)
	}
	n.uevent("add", strings.TrimPrefix(c.Ports[0].SysfsPath, n.sim.Root+"/sys"), "dfl")
	got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 2 })
	if want := "fpga-0000-02-00-0-p0"; !slices.Contains(deviceNames(got), want) {
		t.Fatalf("hot-plugged device %s not published: %v", want, deviceNames(got))
	}

	// An AFU change is found by the cheap re-read, not a rescan.
	const afu = "00112233445566778899aabbccddeeff"
	if err := n.sim.SetAFUID(c.Ports[0], afu); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		for _, d := range s[0].Spec.Devices {
			if v := d.Attributes[driverName+"/afuID"].StringValue; d.Name == "fpga-0000-02-00-0-p0" && v != nil && *v == afu {
				return true
			}
		}
		return false
	})
}

func TestUnhealthyDeviceTaintedAndReported(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 2}})
	n.register(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := n.healthClient(t).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	health := func() map[string]drahealthv1.HealthStatus {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("health stream: %v", err)
		}
		m := map[string]drahealthv1.HealthStatus{}
		for _, d := range resp.Devices {
			m[d.Device.DeviceName] = d.Health
		}
		return m
	}
	if h := health(); h["fpga-0000-01-00-0-p0"] != drahealthv1.HealthStatus_HEALTHY || h["fpga-0000-02-00-0-p0"] != drahealthv1.HealthStatus_HEALTHY {
		t.Fatalf("initial health %v, want both healthy", h)
	}

	if err := n.sim.SetAFUID(n.sim.Cards[1].Ports[0], discovery.AllF); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	for {
		h := health()
		if h["fpga-0000-02-00-0-p0"] == drahealthv1.HealthStatus_UNHEALTHY {
			if h["fpga-0000-01-00-0-p0"] != drahealthv1.HealthStatus_HEALTHY {
				t.Fatalf("the other device turned %v", h["fpga-0000-01-00-0-p0"])
			}
			break
		}
	}
	tainted := func(s []resourceapi.ResourceSlice) *resourceapi.Device {
		for i, d := range s[0].Spec.Devices {
			if d.Name == "fpga-0000-02-00-0-p0" && len(d.Taints) == 1 {
				return &s[0].Spec.Devices[i]
			}
		}
		return nil
	}
	got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return tainted(s) != nil })
	taint := tainted(got).Taints[0]
	if taint.Key != driverName+"/unhealthy" || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || !strings.Contains(taint.Value, "all-f") {
		t.Fatalf("taint %+v, want NoSchedule %s/unhealthy saying all-f", taint, driverName)
	}

	// Recovery clears the taint without a restart.
	if err := n.sim.SetAFUID(n.sim.Cards[1].Ports[0], simnode.SecondAFUID); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		return len(s) == 1 && tainted(s) == nil && len(s[0].Spec.Devices) == 2
	})
}

func TestNoDriverPublishesNothing(t *testing.T) {
	n := startNode(t, nodeOptions{configure: func(c *draplugin.Config) {
		c.Scanner = &discovery.Scanner{Root: t.TempDir()}
	}})
	if res := n.driver.Devices(); len(res.Drivers) != 0 || len(res.Cards) != 0 {
		t.Fatalf("want no driver, got %v with %d cards", res.Drivers, len(res.Cards))
	}
	list, err := n.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("published %d slices with no FPGA driver", len(list.Items))
	}
	n.register(t) // the plugin keeps running
}

func TestErrorRegistersTaintUntilCleared(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 2}, configure: func(c *draplugin.Config) {
		c.UnhealthyEffect = resourceapi.DeviceTaintEffectNoExecute
	}})
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 2 })
	if err := n.sim.SetFMEErrors(n.sim.Cards[0], "0x4"); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(s[0].Spec.Devices[0].Taints) == 1 })
	taint := got[0].Spec.Devices[0].Taints[0]
	if taint.Effect != resourceapi.DeviceTaintEffectNoExecute || !strings.Contains(taint.Value, "0x4") {
		t.Fatalf("taint %+v, want NoExecute naming the error bits", taint)
	}
	if len(got[0].Spec.Devices[1].Taints) != 0 {
		t.Fatalf("the healthy card's device is tainted: %+v", got[0].Spec.Devices[1].Taints)
	}
	if err := n.sim.SetFMEErrors(n.sim.Cards[0], "0x0"); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(s[0].Spec.Devices[0].Taints) == 0 })
}

func TestFailedPublishIsRetried(t *testing.T) {
	var refused atomic.Int32
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 1}, api: func(c *fake.Clientset) {
		c.PrependReactor("create", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refused.Add(1) <= 3 {
				return true, nil, apierrors.NewServiceUnavailable("injected: the API server is overloaded")
			}
			return false, nil, nil
		})
	}})
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 1 })
	if got := refused.Load(); got < 4 {
		t.Fatalf("%d create attempts, want the 3 refused ones retried", got)
	}
}

// TestKubeletCallsBeforeFirstDiscovery: the kubelet may call the plugin as
// soon as its sockets exist, while Start's first discovery pass is still
// reading sysfs. A health stream and a prepare call then wait for that pass:
// the first health report lists the node's device, and nothing crashes.
func TestKubeletCallsBeforeFirstDiscovery(t *testing.T) {
	ctx, n, cfg := newNode(t, nodeOptions{sim: simnode.Options{Cards: 1}})
	cfg.Scanner.ReadTimeout = time.Hour // the test, not a timeout, lets the first pass finish
	afu := filepath.Join(n.sim.Cards[0].Ports[0].SysfsPath, "afu_id")
	id, err := os.ReadFile(afu)
	if err != nil {
		t.Fatal(err)
	}
	// A FIFO holds the first pass at its read of afu_id, as a slow sysfs
	// attribute would.
	if err := os.Remove(afu); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(afu, 0o644); err != nil {
		t.Fatal(err)
	}
	type started struct {
		d   *draplugin.Driver
		err error
	}
	done := make(chan started, 1)
	go func() {
		d, err := draplugin.Start(ctx, cfg)
		done <- started{d, err}
	}()
	// Opening the FIFO for writing returns once the first pass opened it
	// for reading; the plugin's sockets exist by then.
	opened := make(chan *os.File, 1)
	go func() {
		if w, err := os.OpenFile(afu, os.O_WRONLY, 0); err == nil {
			opened <- w
		}
	}()
	var w *os.File
	select {
	case w = <-opened:
	case s := <-done:
		t.Fatalf("Start returned before its first discovery pass read afu_id: %v", s.err)
	}

	stream, err := n.healthClient(t).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan *drahealthv1.NodeWatchResourcesResponse, 1)
	go func() {
		resp, err := stream.Recv()
		if err != nil {
			t.Errorf("health stream: %v", err)
		}
		reports <- resp
	}()
	early := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "early", UID: "early-uid"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "fpga", Driver: driverName, Pool: nodeName, Device: "fpga-0000-01-00-0-p0"}},
		}}},
	}
	if _, err := n.client.ResourceV1().ResourceClaims("default").Create(ctx, early, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prepared := make(chan *drapbv1.NodePrepareResourcesResponse, 1)
	go func() {
		resp, err := n.draClient(t).NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{
			Claims: []*drapbv1.Claim{{Namespace: "default", Name: "early", Uid: "early-uid"}},
		})
		if err != nil {
			t.Errorf("NodePrepareResources: %v", err)
		}
		prepared <- resp
	}()

	// Let the first pass finish.
	if _, err := w.Write(id); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil {
		t.Fatalf("start driver: %v", s.err)
	}
	t.Cleanup(s.d.Stop)
	// Later passes read a regular file again.
	if err := os.Remove(afu); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(afu, id, 0o644); err != nil {
		t.Fatal(err)
	}

	resp := <-reports
	if resp == nil || len(resp.Devices) != 1 || resp.Devices[0].Device.DeviceName != "fpga-0000-01-00-0-p0" || resp.Devices[0].Health != drahealthv1.HealthStatus_HEALTHY {
		t.Errorf("first health report %v, want fpga-0000-01-00-0-p0 healthy", resp)
	}
	if r := <-prepared; r == nil || r.Claims["early-uid"] == nil || !strings.Contains(r.Claims["early-uid"].Error, "not configured to prepare claims") {
		t.Errorf("prepare before the first discovery: %v, want the per-claim answer of a node that prepares no claims", r)
	}
}

// healthStatus is a device's health as the kubelet receives it.
type healthStatus struct {
	health  drahealthv1.HealthStatus
	message string
}

// watchHealth starts a node of two cards whose driver re-sends health
// every resend and opens the kubelet's health stream to it; next returns
// the stream's next report, by device name.
func watchHealth(t *testing.T, resend time.Duration) (n *testNode, next func() map[string]healthStatus) {
	t.Helper()
	n = startNode(t, nodeOptions{sim: simnode.Options{Cards: 2}, configure: func(c *draplugin.Config) { c.HealthResend = resend }})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := n.healthClient(t).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return n, func() map[string]healthStatus {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("health stream: %v", err)
		}
		m := map[string]healthStatus{}
		for _, d := range resp.Devices {
			m[d.Device.DeviceName] = healthStatus{d.Health, d.Message}
		}
		return m
	}
}

// TestHealthStreamResendsAndReportsRemovedDevices: the health stream is
// re-sent without a change (the kubelet marks a device Unknown after its
// timeout), and a hot-unplugged device is reported unhealthy, with the
// reason, rather than silently dropped.
func TestHealthStreamResendsAndReportsRemovedDevices(t *testing.T) {
	t.Run("resent without a change", func(t *testing.T) {
		_, next := watchHealth(t, 50*time.Millisecond)
		first := next()
		if second := next(); len(first) != 2 || !reflect.DeepEqual(first, second) {
			t.Fatalf("reports without a change: %v then %v, want the same two devices twice", first, second)
		}
	})
	t.Run("removed device reported unhealthy", func(t *testing.T) {
		// No resend during the test: every report after the first is sent
		// for a change, so the one after the unplug is the rescan's.
		// (Resends would pile up in the stream's buffer while the
		// rescan runs, each one older than it.)
		n, next := watchHealth(t, time.Hour)
		healthy := healthStatus{health: drahealthv1.HealthStatus_HEALTHY}
		if first := next(); len(first) != 2 || first["fpga-0000-01-00-0-p0"] != healthy || first["fpga-0000-02-00-0-p0"] != healthy {
			t.Fatalf("before unplug: %v, want both ports healthy", first)
		}
		removed := n.sim.Cards[1]
		if err := n.sim.RemoveCard(removed); err != nil {
			t.Fatal(err)
		}
		n.uevent("remove", strings.TrimPrefix(removed.Ports[0].SysfsPath, n.sim.Root+"/sys"), "dfl")
		h := next()
		gone := h["fpga-0000-02-00-0-p0"]
		if len(h) != 2 || gone.health != drahealthv1.HealthStatus_UNHEALTHY || !strings.Contains(gone.message, "removed") || h["fpga-0000-01-00-0-p0"] != healthy {
			t.Fatalf("after unplug: %v, want card 2's port unhealthy as removed and card 1's healthy", h)
		}
	})
}

// sliceBackWithin is how soon a ResourceSlice of this node that someone
// else deleted must be back: the driver's SliceSyncDelay (a second), not
// the library's 30 s, plus room for the controller's work.
const sliceBackWithin = 2 * time.Second

// TestDeletedSliceComesBack: a ResourceSlice of this node that someone
// else deletes is back within sliceBackWithin of the deletion, counted
// from when the test's watch sees the deletion; also once the driver
// unregistered from the kubelet, as a stopping daemon does while it waits
// for programming in flight.
func TestDeletedSliceComesBack(t *testing.T) {
	for _, unregistered := range []bool{false, true} {
		t.Run(fmt.Sprintf("unregistered=%v", unregistered), func(t *testing.T) {
			n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 2}})
			before := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 2 })
			if unregistered {
				n.driver.Unregister()
			}
			gone := before[0]
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			w, err := n.client.ResourceV1().ResourceSlices().Watch(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			next := func() watch.Event {
				t.Helper()
				select {
				case ev, open := <-w.ResultChan():
					if !open || ev.Type == watch.Error {
						t.Fatalf("slice watch ended: %v", ev)
					}
					return ev
				case <-ctx.Done():
					t.Fatalf("the deletion of slice %s was never observed", gone.Name)
					return watch.Event{}
				}
			}
			if err := n.client.ResourceV1().ResourceSlices().Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			for {
				ev := next()
				if s, ok := ev.Object.(*resourceapi.ResourceSlice); ok && ev.Type == watch.Deleted && s.UID == gone.UID {
					break
				}
			}
			deleted := time.Now()

			// back reports whether the node's devices are published again, in a
			// new slice.
			var last []resourceapi.ResourceSlice
			back := func() bool {
				list, err := n.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				last = list.Items
				return len(last) == 1 && last[0].UID != gone.UID && len(deviceNames(last)) == 2
			}
			deadline := time.NewTimer(sliceBackWithin)
			defer deadline.Stop()
			for !back() {
				select {
				case ev, open := <-w.ResultChan():
					if !open || ev.Type == watch.Error {
						t.Fatalf("slice watch ended: %v", ev)
					}
				case <-deadline.C:
					// An event may have raced the timer: the slices as they are
					// now decide.
					if !back() {
						t.Fatalf("deleted slice %s not back within %s of its deletion; slices now: %+v", gone.Name, sliceBackWithin, last)
					}
				}
			}
			t.Logf("the deleted slice was back %s after its deletion was observed", time.Since(deleted).Round(time.Millisecond))
		})
	}
}
