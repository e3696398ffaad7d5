package controller

import (
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/schedulertest"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// allocation is what the scheduler's allocator decided for one claim.
type allocation struct {
	devices  []string // allocated device names
	requests []string // the (sub)request each was allocated for
	// configs are the FpgaConfigs the node will apply, per device.
	configs []*v1alpha1.FpgaConfig
}

// allocate runs the scheduler's structured allocator for claim against the
// published slices and classes, with the devices in allocated in use. It
// returns nil when the claim cannot be allocated.
func allocate(t *testing.T, published []*resourceapi.ResourceSlice, classes schedulertest.Classes, allocated []string, claim *resourceapi.ResourceClaim) *allocation {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	inUse := sets.New[structured.DeviceID]()
	for _, d := range allocated {
		inUse.Insert(structured.MakeDeviceID(testDriver, testNode, d))
	}
	result, err := schedulertest.Allocate(ctx, classes, published, inUse, testNode, claim)
	if err != nil {
		t.Fatal(err)
	}
	if result == nil {
		return nil
	}
	var out allocation
	for _, r := range result.Devices.Results {
		if r.Driver != testDriver || r.Pool != testNode {
			t.Fatalf("allocated %s/%s/%s", r.Driver, r.Pool, r.Device)
		}
		out.devices = append(out.devices, r.Device)
		out.requests = append(out.requests, r.Request)
		// The node's rule: class configs, then claim configs, the last
		// one that applies to the request wins (draplugin.Claims).
		var cfg *v1alpha1.FpgaConfig
		for _, c := range result.Devices.Config {
			if c.Opaque == nil || c.Opaque.Driver != testDriver || (len(c.Requests) > 0 && !slices.Contains(c.Requests, r.Request)) {
				continue
			}
			decoded, err := v1alpha1.DecodeAndValidate(c.Opaque.Parameters.Raw)
			if err != nil {
				t.Fatalf("the allocation carries an FpgaConfig the node rejects: %v", err)
			}
			cfg = decoded
		}
		out.configs = append(out.configs, cfg)
	}
	return &out
}

// exactClaim asks for one device of className.
func exactClaim(className string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: types.UID("uid-claim")},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "fpga",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: className, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			},
		}}}},
	}
}

// firstAvailableClaim is what the example ResourceClaimTemplate generates:
// a loaded function first, a region to program second.
func firstAvailableClaim(afName string) *resourceapi.ResourceClaim {
	sub := func(name, class string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: class,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: types.UID("uid-claim")},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "fpga",
			FirstAvailable: []resourceapi.DeviceSubRequest{
				sub("loaded", afName),
				sub("program", afName+v1alpha1.ProgramClassSuffix),
			},
		}}}},
	}
}

// classesFor renders the DeviceClasses of the given objects.
func classesFor(t *testing.T, afs []*v1alpha1.AcceleratorFunction, regions []*v1alpha1.FpgaRegion) schedulertest.Classes {
	t.Helper()
	l := schedulertest.Classes{testDriver: BaseDeviceClass(testDriver)}
	for _, af := range afs {
		if errs := v1alpha1.ValidateAcceleratorFunction(af); len(errs) > 0 {
			t.Fatalf("fixture AcceleratorFunction %s is invalid: %v", af.Name, errs)
		}
		classes, err := AcceleratorFunctionClasses(af, testDriver, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range classes {
			l[c.Name] = c
		}
	}
	for _, r := range regions {
		l[r.Name] = FpgaRegionClass(r, testDriver)
	}
	return l
}

// TestGeneratedClassesAllocate runs the scheduler's allocator with the
// DeviceClasses the controller generates against the slices the node
// daemon publishes for a simulated node: two cards with two ports each,
// the first port of each card holding AFU A, the second AFU B.
func TestGeneratedClassesAllocate(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	withA, withB, all := portsWith(res, testAFUID), portsWith(res, testSecondID), portsWith(res, "")
	if len(withA) != 2 || len(withB) != 2 || len(all) != 4 {
		t.Fatalf("fixture: ports with A %v, with B %v, all %v", withA, withB, all)
	}
	classes := classesFor(t, []*v1alpha1.AcceleratorFunction{
		acceleratorFunction("nlb-a", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion}),
		acceleratorFunction("nlb-b", v1alpha1.AcceleratorFunctionSpec{AFUID: testSecondID}),
		acceleratorFunction("nlb-a-elsewhere", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: otherIfID, Mode: v1alpha1.ModeRegion}),
		acceleratorFunction("nlb-c", v1alpha1.AcceleratorFunctionSpec{AFUID: "c0ffee00c0ffee00c0ffee00c0ffee00", InterfaceID: testIfID, Mode: v1alpha1.ModeRegion}),
	}, []*v1alpha1.FpgaRegion{fpgaRegion("pac-a10", testIfID), fpgaRegion("other-region", otherIfID)})
	if _, err := classes.Get("nlb-b-program"); err == nil {
		t.Error("an af-mode function has a program class")
	}
	programmable := publishedSlices(t, n, res, testNode, true)
	locked := publishedSlices(t, n, res, testNode, false)

	for _, tc := range []struct {
		name      string
		slices    []*resourceapi.ResourceSlice
		class     string
		allocated []string
		want      []string // candidates, any one may be chosen; nil: no allocation
		wantProg  v1alpha1.ProgrammingPolicy
	}{
		{name: "loaded AFU A", slices: programmable, class: "nlb-a", want: withA, wantProg: v1alpha1.ProgrammingNever},
		{name: "loaded AFU A, one in use", slices: programmable, class: "nlb-a", allocated: withA[:1], want: withA[1:], wantProg: v1alpha1.ProgrammingNever},
		{name: "loaded AFU A, all in use", slices: programmable, class: "nlb-a", allocated: withA},
		{name: "af mode without interface ID", slices: programmable, class: "nlb-b", want: withB, wantProg: v1alpha1.ProgrammingNever},
		{name: "program A into any compatible region", slices: programmable, class: "nlb-a-program", allocated: withA, want: withB, wantProg: v1alpha1.ProgrammingIfNeeded},
		{name: "program C", slices: programmable, class: "nlb-c-program", want: all, wantProg: v1alpha1.ProgrammingIfNeeded},
		{name: "C is loaded nowhere", slices: programmable, class: "nlb-c"},
		{name: "nothing to program on a locked node", slices: locked, class: "nlb-c-program"},
		{name: "loaded A is still usable on a locked node", slices: locked, class: "nlb-a", want: withA, wantProg: v1alpha1.ProgrammingNever},
		{name: "A for another interface", slices: programmable, class: "nlb-a-elsewhere"},
		{name: "A for another interface, programmed", slices: programmable, class: "nlb-a-elsewhere-program"},
		{name: "region", slices: programmable, class: "pac-a10", want: all},
		{name: "region on a locked node", slices: locked, class: "pac-a10"},
		{name: "other region", slices: programmable, class: "other-region"},
		{name: "base class", slices: locked, class: testDriver, want: all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := allocate(t, tc.slices, classes, tc.allocated, exactClaim(tc.class))
			if tc.want == nil {
				if got != nil {
					t.Fatalf("allocated %v, want no allocation", got.devices)
				}
				return
			}
			if got == nil || len(got.devices) != 1 || !slices.Contains(tc.want, got.devices[0]) {
				t.Fatalf("allocated %+v, want one of %v", got, tc.want)
			}
			if tc.wantProg == "" {
				if got.configs[0] != nil {
					t.Errorf("config = %+v, want none", got.configs[0])
				}
				return
			}
			if cfg := got.configs[0]; cfg == nil || cfg.Programming != tc.wantProg {
				t.Errorf("config = %+v, want programming %s", cfg, tc.wantProg)
			}
		})
	}
}

// TestFirstAvailablePrefersLoadedFunction checks the example
// ResourceClaimTemplate's promise: a pod gets a port where the function is
// already loaded while one is free, and a region to program only when none
// is; with every compatible port in use it waits.
func TestFirstAvailablePrefersLoadedFunction(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	withA, withB := portsWith(res, testAFUID), portsWith(res, testSecondID)
	classes := classesFor(t, []*v1alpha1.AcceleratorFunction{
		acceleratorFunction("nlb-a", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion,
			Bitstream: "nlb-a.gbs"}),
	}, nil)
	published := publishedSlices(t, n, res, testNode, true)

	var inUse []string
	for i := range withA {
		got := allocate(t, published, classes, inUse, firstAvailableClaim("nlb-a"))
		if got == nil || !slices.Contains(withA, got.devices[0]) || got.requests[0] != "fpga/loaded" {
			t.Fatalf("claim %d with %v in use: allocated %+v, want a port with AFU A loaded (%v) for fpga/loaded", i, inUse, got, withA)
		}
		if cfg := got.configs[0]; cfg == nil || cfg.Programming != v1alpha1.ProgrammingNever || cfg.AFUID != testAFUID {
			t.Errorf("config for a loaded port = %+v, want programming Never of AFU A", cfg)
		}
		inUse = append(inUse, got.devices[0])
	}
	for i := range withB {
		got := allocate(t, published, classes, inUse, firstAvailableClaim("nlb-a"))
		if got == nil || !slices.Contains(withB, got.devices[0]) || got.requests[0] != "fpga/program" {
			t.Fatalf("claim %d with %v in use: allocated %+v, want a region to program (%v) for fpga/program", len(withA)+i, inUse, got, withB)
		}
		if cfg := got.configs[0]; cfg == nil || cfg.Programming != v1alpha1.ProgrammingIfNeeded || cfg.AFUID != testAFUID || cfg.Bitstream != "nlb-a.gbs" {
			t.Errorf("config for a region to program = %+v, want programming IfNeeded of AFU A from nlb-a.gbs", cfg)
		}
		inUse = append(inUse, got.devices[0])
	}
	if got := allocate(t, published, classes, inUse, firstAvailableClaim("nlb-a")); got != nil {
		t.Errorf("with every port in use: allocated %+v, want no allocation", got)
	}
}

// TestSelectorAttributesArePublished ties the attribute names the selectors
// use to the ones the node daemon publishes.
func TestSelectorAttributesArePublished(t *testing.T) {
	for got, want := range map[string]string{
		attrAFUID:        deviceslice.AttrAFUID,
		attrInterfaceID:  deviceslice.AttrInterfaceID,
		attrProgrammable: deviceslice.AttrProgrammable,
	} {
		if got != want {
			t.Errorf("selector attribute %q, the node publishes %q", got, want)
		}
	}
	if maxInterfaceIDs != discovery.MaxInterfaceIDs {
		t.Errorf("selectors test %d interface ID attributes, the node publishes up to %d", maxInterfaceIDs, discovery.MaxInterfaceIDs)
	}
}

// TestClassesSelectAnyInterfaceOfTheShell: an Alveo shell lists two
// interface UUIDs and loads an xclbin built for either, so the classes of
// an FpgaRegion and of a function built for the second select its card as
// they do for the first; a class of an interface the shell does not list
// selects nothing. The scheduler's allocator decides, against what the node
// publishes for a simulated node with Intel cards, a U250 and a U55C.
func TestClassesSelectAnyInterfaceOfTheShell(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Alveo: []string{"u250", "u55c"}})
	var u55c []string
	for _, c := range res.Cards {
		if slices.Contains(c.InterfaceIDs, simnode.U55CSecondInterfaceID) {
			u55c = append(u55c, c.Ports[0].DeviceName())
		}
	}
	if len(u55c) != 1 {
		t.Fatalf("fixture: U55C ports %v, want one", u55c)
	}
	const xclbin = "5eed0000000000000000000000000001"
	classes := classesFor(t, []*v1alpha1.AcceleratorFunction{
		acceleratorFunction("kernel-second", v1alpha1.AcceleratorFunctionSpec{AFUID: xclbin, InterfaceID: simnode.U55CSecondInterfaceID, Mode: v1alpha1.ModeRegion}),
		acceleratorFunction("kernel-first", v1alpha1.AcceleratorFunctionSpec{AFUID: xclbin, InterfaceID: simnode.U55CInterfaceID, Mode: v1alpha1.ModeRegion}),
		acceleratorFunction("kernel-nowhere", v1alpha1.AcceleratorFunctionSpec{AFUID: xclbin, InterfaceID: otherIfID, Mode: v1alpha1.ModeRegion}),
	}, []*v1alpha1.FpgaRegion{fpgaRegion("u55c-second", simnode.U55CSecondInterfaceID), fpgaRegion("u55c-first", simnode.U55CInterfaceID)})
	published := publishedSlices(t, n, res, testNode, true)
	for class, want := range map[string][]string{
		"u55c-second":            u55c,
		"u55c-first":             u55c,
		"kernel-second-program":  u55c,
		"kernel-first-program":   u55c,
		"kernel-nowhere-program": nil,
	} {
		t.Run(class, func(t *testing.T) {
			got := allocate(t, published, classes, nil, exactClaim(class))
			switch {
			case want == nil && got != nil:
				t.Fatalf("allocated %v, want no allocation", got.devices)
			case want == nil:
			case got == nil || !slices.Equal(got.devices, want):
				t.Fatalf("allocated %+v, want %v", got, want)
			}
		})
	}
}

// TestClassesSelectWhatTheShellAccepts: the classes select a card by
// exactly the interfaces its region accepts (discovery.Card.Interfaces):
// not by an all-zero entry of the shell's list, which the node refuses to
// load a bitstream for, and by every usable one up to the fourth, however
// often the shell repeats an earlier one. The scheduler's allocator
// decides, against what the node publishes.
func TestClassesSelectWhatTheShellAccepts(t *testing.T) {
	const zero, fourth = "00000000000000000000000000000000", "44444444444444444444444444444444"
	tn := testnode.New(t, testnode.Options{Sim: simnode.Options{Alveo: []string{"u55c"}}})
	ids := []string{simnode.U55CInterfaceID, zero, simnode.U55CInterfaceID, simnode.U55CSecondInterfaceID, fourth}
	if err := tn.Sim.SetAlveoStatus(tn.Sim.Alveo[0], "interface_uuids", strings.Join(ids, "\n")); err != nil {
		t.Fatal(err)
	}
	res := tn.Devices(t)
	var card *discovery.Card
	for _, c := range res.Cards {
		if c.Driver == discovery.DriverXRT {
			card = c
		}
	}
	if card == nil || !card.Ports[0].Health.Healthy {
		t.Fatalf("fixture: want a healthy U55C, got %+v", card)
	}
	dev := []string{card.Ports[0].DeviceName()}
	classes := classesFor(t, nil, []*v1alpha1.FpgaRegion{
		fpgaRegion("zero", zero), fpgaRegion("second", simnode.U55CSecondInterfaceID), fpgaRegion("fourth", fourth),
	})
	published := publishedSlices(t, tn.Sim, res, testNode, true)
	for class, want := range map[string][]string{"zero": nil, "second": dev, "fourth": dev} {
		t.Run(class, func(t *testing.T) {
			id := map[string]string{"zero": zero, "second": simnode.U55CSecondInterfaceID, "fourth": fourth}[class]
			if accepts := card.Accepts(id); accepts != (want != nil) {
				t.Fatalf("fixture: the node accepts %s: %v", id, accepts)
			}
			got := allocate(t, published, classes, nil, exactClaim(class))
			switch {
			case want == nil && got != nil:
				t.Fatalf("allocated %v for interface %s, which the node refuses to load", got.devices, id)
			case want != nil && (got == nil || !slices.Equal(got.devices, want)):
				t.Fatalf("allocated %+v for interface %s, which the node loads; want %v", got, id, want)
			}
		})
	}
}
