package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateAcceleratorFunction(t *testing.T) {
	valid := func() *AcceleratorFunction {
		return &AcceleratorFunction{
			ObjectMeta: metav1.ObjectMeta{Name: "nlb0"},
			Spec: AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testInterfaceID, Mode: ModeRegion,
				Bitstream: "nlb0.gbs", SHA256: testSHA256, Description: "native loopback"},
		}
	}
	tests := []struct {
		name    string
		edit    func(af *AcceleratorFunction)
		wantErr []string // substrings; empty means valid
	}{
		{name: "region mode, every field", edit: func(*AcceleratorFunction) {}},
		{name: "af mode, afuID only", edit: func(af *AcceleratorFunction) { af.Spec = AcceleratorFunctionSpec{AFUID: testAFUID, Mode: ModeAF} }},
		{name: "mode unset counts as af", edit: func(af *AcceleratorFunction) { af.Spec = AcceleratorFunctionSpec{AFUID: testAFUID} }},
		{name: "longest name", edit: func(af *AcceleratorFunction) { af.Name = strings.Repeat("a", 245) }},
		{name: "name too long for the program class", edit: func(af *AcceleratorFunction) { af.Name = strings.Repeat("a", 246) },
			wantErr: []string{"metadata.name: Too long: may not be more than 245 bytes", `"` + strings.Repeat("a", 246) + `-program" must fit in 253`}},
		{name: "name not a DNS subdomain", edit: func(af *AcceleratorFunction) { af.Name = "NLB_0" },
			wantErr: []string{`metadata.name: Invalid value: "NLB_0"`}},
		{name: "afuID missing", edit: func(af *AcceleratorFunction) { af.Spec.AFUID = "" },
			wantErr: []string{"spec.afuID: Required value"}},
		{name: "afuID dashed", edit: func(af *AcceleratorFunction) { af.Spec.AFUID = testAFUIDDashed },
			wantErr: []string{"spec.afuID: Invalid value", "is not canonical"}},
		{name: "afuID all f", edit: func(af *AcceleratorFunction) { af.Spec.AFUID = allF },
			wantErr: []string{"spec.afuID: Invalid value", "unusable function"}},
		{name: "interfaceID all f", edit: func(af *AcceleratorFunction) { af.Spec.InterfaceID = allF },
			wantErr: []string{"spec.interfaceID: Invalid value", "unusable region"}},
		{name: "region mode without interfaceID", edit: func(af *AcceleratorFunction) { af.Spec.InterfaceID = "" },
			wantErr: []string{"spec.interfaceID: Required value: required in region mode"}},
		{name: "af mode with bitstream and sha256", edit: func(af *AcceleratorFunction) { af.Spec.Mode = ModeAF },
			wantErr: []string{"spec.bitstream: Forbidden: allowed in region mode only", "spec.sha256: Forbidden"}},
		{name: "region mode with bitstreamRef", edit: func(af *AcceleratorFunction) { af.Spec.Bitstream, af.Spec.BitstreamRef = "", testRef }},
		{name: "af mode with bitstreamRef", edit: func(af *AcceleratorFunction) {
			af.Spec = AcceleratorFunctionSpec{AFUID: testAFUID, Mode: ModeAF, BitstreamRef: testRef}
		}, wantErr: []string{"spec.bitstreamRef: Forbidden: allowed in region mode only"}},
		{name: "bitstream and bitstreamRef", edit: func(af *AcceleratorFunction) { af.Spec.BitstreamRef = testRef },
			wantErr: []string{"spec.bitstreamRef: Forbidden: bitstream and bitstreamRef exclude each other"}},
		{name: "bitstreamRef with a tag only", edit: func(af *AcceleratorFunction) {
			af.Spec.Bitstream, af.Spec.BitstreamRef = "", "registry.example.com/accel/nlb0:v2"
		}, wantErr: []string{`spec.bitstreamRef: Invalid value: "registry.example.com/accel/nlb0:v2": has no digest`}},
		{name: "unknown mode", edit: func(af *AcceleratorFunction) { af.Spec.Mode = "devel" },
			wantErr: []string{`spec.mode: Unsupported value: "devel": supported values: "af", "region"`}},
		{name: "bitstream escapes", edit: func(af *AcceleratorFunction) { af.Spec.Bitstream = "../x.gbs" },
			wantErr: []string{"spec.bitstream: Invalid value", `".."`}},
		{name: "bitstream with a control character", edit: func(af *AcceleratorFunction) { af.Spec.Bitstream = "a\tb.gbs" },
			wantErr: []string{"spec.bitstream: Invalid value", "control characters"}},
		{name: "sha256 uppercase", edit: func(af *AcceleratorFunction) { af.Spec.SHA256 = strings.ToUpper(testSHA256) },
			wantErr: []string{"spec.sha256: Invalid value"}},
		{name: "description too long", edit: func(af *AcceleratorFunction) { af.Spec.Description = strings.Repeat("x", 1025) },
			wantErr: []string{"spec.description: Too long: 1025 characters, at most 1024"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			af := valid()
			tc.edit(af)
			err := ValidateAcceleratorFunction(af).ToAggregate()
			checkErrors(t, err, tc.wantErr)
		})
	}
}

func TestValidateFpgaRegion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		region  FpgaRegion
		wantErr []string
	}{
		{name: "valid", region: FpgaRegion{ObjectMeta: metav1.ObjectMeta{Name: "pac-a10"}, Spec: FpgaRegionSpec{InterfaceID: testInterfaceID}}},
		{name: "interfaceID missing", region: FpgaRegion{ObjectMeta: metav1.ObjectMeta{Name: "pac-a10"}},
			wantErr: []string{"spec.interfaceID: Required value"}},
		{name: "interfaceID short", region: FpgaRegion{ObjectMeta: metav1.ObjectMeta{Name: "pac-a10"}, Spec: FpgaRegionSpec{InterfaceID: "69528db6"}},
			wantErr: []string{`spec.interfaceID: Invalid value: "69528db6": has 8 hex digits, want 32`}},
		{name: "name missing", region: FpgaRegion{Spec: FpgaRegionSpec{InterfaceID: testInterfaceID}},
			wantErr: []string{"metadata.name: Required value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateFpgaRegion(&tc.region).ToAggregate(), tc.wantErr)
		})
	}
}

// checkErrors checks that err contains every one of want, or is nil when
// want is empty.
func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("error = %v, want none", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error = %q\nwant it to contain %q", err, w)
		}
	}
}

func TestCustomResourcesInScheme(t *testing.T) {
	for _, kind := range []string{AcceleratorFunctionKind, "AcceleratorFunctionList", FpgaRegionKind, "FpgaRegionList"} {
		if _, err := scheme.New(SchemeGroupVersion.WithKind(kind)); err != nil {
			t.Errorf("scheme.New(%s) error = %v", kind, err)
		}
	}
	// An AcceleratorFunction is no FpgaConfig.
	_, err := Decode([]byte(`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","spec":{"afuID":"` + testAFUID + `"}}`))
	if err == nil || !strings.Contains(err.Error(), "want apiVersion: fpga.dra.dev/v1alpha1, kind: FpgaConfig") {
		t.Errorf("Decode(AcceleratorFunction) error = %v", err)
	}
}
