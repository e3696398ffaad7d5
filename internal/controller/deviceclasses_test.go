package controller

import (
	"testing"

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
