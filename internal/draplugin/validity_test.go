package draplugin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// sliceProblems checks a ResourceSlice's devices as the API server's
// validation of resource.k8s.io/v1 does where the driver's data can break
// it: device names (DNS labels, unique), attribute names and counts,
// string values (at most 64 bytes), taints (qualified keys, label values,
// at most 16), and the number of devices in one slice (128, or 64 when a
// device uses an advanced feature such as taints).
func sliceProblems(s *resourceapi.ResourceSlice) field.ErrorList {
	var errs field.ErrorList
	devices := field.NewPath("spec", "devices")
	maxDevices := resourceapi.ResourceSliceMaxDevices
	for _, d := range s.Spec.Devices {
		if len(d.Taints) > 0 {
			maxDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
		}
	}
	if len(s.Spec.Devices) > maxDevices {
		errs = append(errs, field.TooMany(devices, len(s.Spec.Devices), maxDevices))
	}
	names := map[string]bool{}
	for i, d := range s.Spec.Devices {
		p := devices.Index(i)
		for _, msg := range validation.IsDNS1123Label(d.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), d.Name, msg))
		}
		if names[d.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), d.Name))
		}
		names[d.Name] = true
		if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			errs = append(errs, field.TooMany(p.Child("attributes"), n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice))
		}
		for name, a := range d.Attributes {
			if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
				errs = append(errs, field.TooLong(p.Child("attributes").Key(string(name)).Child("string"), *a.StringValue, resourceapi.DeviceAttributeMaxValueLength))
			}
		}
		if len(d.Taints) > resourceapi.DeviceTaintsMaxLength {
			errs = append(errs, field.TooMany(p.Child("taints"), len(d.Taints), resourceapi.DeviceTaintsMaxLength))
		}
		for k, taint := range d.Taints {
			for _, msg := range validation.IsQualifiedName(taint.Key) {
				errs = append(errs, field.Invalid(p.Child("taints").Index(k).Child("key"), taint.Key, msg))
			}
			for _, msg := range validation.IsValidLabelValue(taint.Value) {
				errs = append(errs, field.Invalid(p.Child("taints").Index(k).Child("value"), taint.Value, msg))
			}
		}
	}
	return errs
}

// validateSlices makes the fake API server refuse a ResourceSlice that the
// real one's validation refuses (sliceProblems), as Invalid.
func validateSlices(c *fake.Clientset) {
	c.PrependReactor("*", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		// A create or an update: both carry the object.
		a, ok := action.(k8stesting.CreateAction)
		if !ok {
			return false, nil, nil
		}
		s, ok := a.GetObject().(*resourceapi.ResourceSlice)
		if !ok {
			return false, nil, nil
		}
		if errs := sliceProblems(s); len(errs) > 0 {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: resourceapi.GroupName, Kind: "ResourceSlice"}, s.Name, errs)
		}
		return false, nil, nil
	})
}

// TestTaintedNodeOfManyPortsIsPublished: a node with more ports than fit
// one slice of devices with taints (64) publishes every port, and goes on
// publishing once one of them turns unhealthy: the API server refuses a
// slice of more than 64 devices when any of them carries a taint, and a
// refused slice publishes none of its devices.
func TestTaintedNodeOfManyPortsIsPublished(t *testing.T) {
	n := startNode(t, nodeOptions{sim: simnode.Options{Cards: 10, PortsPerCard: 7}, api: validateSlices})
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return len(deviceNames(s)) == 70 })
	sick := n.sim.Cards[9].Ports[6]
	if err := n.sim.SetPortErrors(sick, "0x1"); err != nil {
		t.Fatal(err)
	}
	n.driver.RefreshDevices()
	got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool {
		tainted := 0
		for _, sl := range s {
			for _, d := range sl.Spec.Devices {
				tainted += len(d.Taints)
			}
		}
		return len(deviceNames(s)) == 70 && tainted == 1
	})
	for _, s := range got {
		if errs := sliceProblems(&s); len(errs) > 0 {
			t.Errorf("published slice the API server refuses: %v", errs.ToAggregate())
		}
	}
}

// TestOverlongAttributeIsLeftOut: a string attribute the kernel reports
// longer than a ResourceSlice holds (64 bytes; a broken or hostile FME's
// bitstream_id, a PCI function's vendor) is left out of the device, as an
// unreported one is: published, it would make the API server refuse the
// node's whole slice, and no device of the node would be offered.
func TestOverlongAttributeIsLeftOut(t *testing.T) {
	sim, err := simnode.Write(t.TempDir(), simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1})
	if err != nil {
		t.Fatal(err)
	}
	long := "0x" + strings.Repeat("0123456789abcdef", 5)
	c := sim.Cards[1]
	for path, v := range map[string]string{
		filepath.Join(c.FMEPath, "bitstream_id"): long,
		filepath.Join(c.PCIPath, "vendor"):       long,
	} {
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := (&discovery.Scanner{Root: sim.Root}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cards) != 2 || res.Cards[1].BitstreamID != long {
		t.Fatalf("want 2 cards, the second with the overlong bitstream_id %q: %d cards, errors %v", long, len(res.Cards), res.Errors)
	}
	devices := deviceslice.Devices(res, deviceslice.Options{DriverName: driverName, Root: sim.Root})
	s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: devices}}
	if errs := sliceProblems(&s); len(errs) > 0 {
		t.Errorf("devices the API server refuses: %v", errs.ToAggregate())
	}
	for _, name := range []string{"bitstreamID", deviceslice.AttrVendorID, deviceslice.AttrModel} {
		if a, ok := devices[1].Attributes[resourceapi.QualifiedName(driverName+"/"+name)]; ok {
			t.Errorf("overlong %s published as %q", name, *a.StringValue)
		}
	}
	for _, name := range []string{"bitstreamID", deviceslice.AttrVendorID, deviceslice.AttrModel} {
		if a := devices[0].Attributes[resourceapi.QualifiedName(driverName+"/"+name)]; a.StringValue == nil {
			t.Errorf("the sound card's %s is missing", name)
		}
	}
}
