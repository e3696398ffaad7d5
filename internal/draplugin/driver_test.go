package draplugin_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
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
				if v := attr(draplugin.AttrAFUID).StringValue; v == nil || *v != p.AFUID {
					t.Errorf("%s afuID %v, want %s", d.Name, v, p.AFUID)
				}
				if v := attr(draplugin.AttrInterfaceID).StringValue; v == nil || *v != simnode.DefaultInterfaceID {
					t.Errorf("%s interfaceID %v", d.Name, v)
				}
				if v := attr(draplugin.AttrKernelDriver).StringValue; v == nil || *v != string(drv) {
					t.Errorf("%s kernelDriver %v", d.Name, v)
				}
				if v := attr(draplugin.AttrPortID).IntValue; v == nil || *v != int64(p.ID) {
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
	if res := n.driver.Devices(); res.Driver != discovery.DriverNone || len(res.Cards) != 0 {
		t.Fatalf("want driver none, got %q with %d cards", res.Driver, len(res.Cards))
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
