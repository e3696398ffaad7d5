package controller

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// TestExtendedResourceName: the loaded class of an AcceleratorFunction
// serves the Intel FPGA device plugin's af resource name in the configured
// domain; the program class, functions without an interface ID and an
// empty domain serve none.
func TestExtendedResourceName(t *testing.T) {
	const (
		ifID = "69528db6-eb31-577a-8c36-68f9faa081f6" // dashes are canonicalised
		afu  = "d8424dc4a4a3c413f89e433683f9040b"
		want = "fpga.intel.com/af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
	)
	region := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: afu, InterfaceID: ifID, Mode: v1alpha1.ModeRegion, Bitstream: "nlb0.gbs"})
	classes, err := AcceleratorFunctionClasses(region, testDriver, "fpga.intel.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(classes) != 2 {
		t.Fatalf("%d classes", len(classes))
	}
	if got := classes[0].Spec.ExtendedResourceName; got == nil || *got != want {
		t.Errorf("loaded class extendedResourceName %v, want %s", got, want)
	}
	if got := classes[1].Spec.ExtendedResourceName; got != nil {
		t.Errorf("program class extendedResourceName %q, want none: one class serves a name", *got)
	}
	for name, c := range map[string]struct {
		af     *v1alpha1.AcceleratorFunction
		domain string
	}{
		"no interface ID": {acceleratorFunction("any", v1alpha1.AcceleratorFunctionSpec{AFUID: afu}), "fpga.intel.com"},
		"no domain":       {region, ""},
	} {
		classes, err := AcceleratorFunctionClasses(c.af, testDriver, c.domain)
		if err != nil {
			t.Fatal(err)
		}
		if got := classes[0].Spec.ExtendedResourceName; got != nil {
			t.Errorf("%s: extendedResourceName %q, want none", name, *got)
		}
	}
}

// TestExtendedResourceNameDroppedByServer: an API server without the
// DRAExtendedResource feature drops extendedResourceName on write; the
// controller notices and does not update the class on every reconcile.
func TestExtendedResourceNameDroppedByServer(t *testing.T) {
	for _, drops := range []bool{false, true} {
		t.Run(fmt.Sprintf("drops=%v", drops), func(t *testing.T) {
			tc := newTestController(t, nil)
			tc.extendedResourceDomain = "fpga.intel.com"
			if drops {
				strip := func(action k8stesting.Action) (bool, runtime.Object, error) {
					obj := action.(interface{ GetObject() runtime.Object }).GetObject().(*resourceapi.DeviceClass)
					obj.Spec.ExtendedResourceName = nil
					return false, nil, nil // the tracker stores what is left
				}
				tc.kube.PrependReactor("create", "deviceclasses", strip)
				tc.kube.PrependReactor("update", "deviceclasses", strip)
			}
			tc.startInformers(t)
			tc.putAF(t, acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID}))
			tc.syncAF(t, "nlb0")
			if got := tc.class(t, "nlb0").Spec.ExtendedResourceName; (got == nil) != drops {
				t.Fatalf("stored extendedResourceName %v", got)
			}
			writes := func() int {
				n := 0
				for _, a := range tc.kube.Actions() {
					if a.GetResource().Resource == "deviceclasses" && (a.GetVerb() == "update" || a.GetVerb() == "create") {
						n++
					}
				}
				return n
			}
			before := writes()
			tc.syncAF(t, "nlb0")
			tc.syncAF(t, "nlb0")
			if n := writes() - before; n != 0 {
				t.Fatalf("%d DeviceClass writes on reconciles with nothing to change", n)
			}
		})
	}
}

// TestProgramClassCarriesBitstreamRef: the program class of a region-mode
// function that names an OCI artifact hands the node exactly that
// reference, in a config the node accepts; the loaded class loads nothing.
func TestProgramClassCarriesBitstreamRef(t *testing.T) {
	ref := "registry.example.com/accel/nlb0:v2@sha256:" + testSHA256
	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion, BitstreamRef: ref})
	if errs := v1alpha1.ValidateAcceleratorFunction(af); len(errs) > 0 {
		t.Fatal(errs.ToAggregate())
	}
	classes, err := AcceleratorFunctionClasses(af, testDriver, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := classConfig(t, classes[1]); got.BitstreamRef != ref || got.Bitstream != "" || got.Programming != v1alpha1.ProgrammingIfNeeded {
		t.Errorf("program class config = %+v, want bitstreamRef %s", got, ref)
	}
	if got := classConfig(t, classes[0]); got.BitstreamRef != ref || got.Programming != v1alpha1.ProgrammingIfNeeded {
		t.Errorf("loaded class config = %+v, want the pin %s checked (IfNeeded)", got, ref)
	}
}
