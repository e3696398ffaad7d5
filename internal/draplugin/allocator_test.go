package draplugin_test

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/schedulertest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

func class(name, expr string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: expr},
		}}},
	}
}

func claimFor(className string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-" + className, Namespace: "default", UID: types.UID("uid-" + className)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "fpga",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: className,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
			},
		}}}},
	}
}

// TestSchedulerAllocatesPublishedDevices runs the scheduler's allocator on
// the ResourceSlices the driver published, with DeviceClasses selecting by
// the driver's attributes.
func TestSchedulerAllocatesPublishedDevices(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 3}})
	// Make the third card's port unhealthy: its taint keeps it from being
	// allocated although it matches the interface ID.
	if err := n.sim.SetPortErrors(n.sim.Cards[2].Ports[0], "0x1"); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	published := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		return len(deviceNames(s)) == 3 && len(s[0].Spec.Devices[2].Taints) == 1
	})
	var slicePtrs []*resourceapi.ResourceSlice
	for i := range published {
		slicePtrs = append(slicePtrs, &published[i])
	}

	q := fmt.Sprintf("device.attributes[%q]", driverName)
	classes := schedulertest.Classes{
		"by-interface": class("by-interface", fmt.Sprintf(`device.driver == %q && %s.interfaceID == %q`, driverName, q, simnode.DefaultInterfaceID)),
		"by-afu":       class("by-afu", fmt.Sprintf(`device.driver == %q && %s.afuID == %q`, driverName, q, simnode.SecondAFUID)),
		"by-afu-vf":    class("by-afu-vf", fmt.Sprintf(`%s.afuID == %q && %s.virtualFunction`, q, simnode.SecondAFUID, q)),
		"nothing":      class("nothing", fmt.Sprintf(`%s.afuID == %q`, q, discovery.AllF)),
		"programmable": class("programmable", fmt.Sprintf(`%s.programmable && %s.numaNode == 1`, q, q)),
	}
	_, ctx := ktesting.NewTestContext(t)

	allocate := func(t *testing.T, allocated sets.Set[structured.DeviceID], className string) ([]string, error) {
		t.Helper()
		result, err := schedulertest.Allocate(ctx, classes, slicePtrs, allocated, nodeName, claimFor(className))
		if err != nil || result == nil {
			return nil, err
		}
		var names []string
		for _, r := range result.Devices.Results {
			if r.Driver != driverName || r.Pool != nodeName {
				t.Fatalf("allocated %s/%s/%s", r.Driver, r.Pool, r.Device)
			}
			names = append(names, r.Device)
		}
		return names, nil
	}

	for _, tc := range []struct {
		class     string
		allocated []string
		want      []string // nil: must fail to allocate
	}{
		{class: "by-interface", want: []string{"fpga-0000-01-00-0-p0"}},
		{class: "by-interface", allocated: []string{"fpga-0000-01-00-0-p0"}, want: []string{"fpga-0000-02-00-0-p0"}},
		// The only other match is tainted.
		{class: "by-interface", allocated: []string{"fpga-0000-01-00-0-p0", "fpga-0000-02-00-0-p0"}},
		{class: "by-afu", want: []string{"fpga-0000-02-00-0-p0"}},
		{class: "by-afu-vf"},
		{class: "nothing"},
		{class: "programmable", want: []string{"fpga-0000-02-00-0-p0"}},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.class, tc.allocated), func(t *testing.T) {
			allocated := sets.New[structured.DeviceID]()
			for _, d := range tc.allocated {
				allocated.Insert(structured.MakeDeviceID(driverName, nodeName, d))
			}
			got, err := allocate(t, allocated, tc.class)
			if err != nil {
				t.Fatalf("allocate: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("allocated %v, want %v", got, tc.want)
			}
		})
	}
}
