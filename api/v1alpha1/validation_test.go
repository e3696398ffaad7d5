package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateCase edits a valid, defaulted config and names the errors
// Validate must then report.
type validateCase struct {
	name string
	// edit changes a valid, defaulted config.
	edit func(c *FpgaConfig)
	// wantErr holds substrings of the error, each naming the field
	// path; empty means valid.
	wantErr []string
}

// validateCases lists valid configs first, then one case per rule Validate
// enforces.
var validateCases = []validateCase{
	{name: "every field set", edit: func(c *FpgaConfig) {}},
	{name: "afuID only", edit: func(c *FpgaConfig) {
		*c = FpgaConfig{AFUID: testAFUID, Programming: ProgrammingIfNeeded}
	}},
	{name: "Always", edit: func(c *FpgaConfig) { c.Programming = ProgrammingAlways }},
	{name: "Never with afuID and interfaceID", edit: func(c *FpgaConfig) {
		c.Programming, c.Bitstream, c.SHA256 = ProgrammingNever, "", ""
	}},
	{name: "sha256 without bitstream", edit: func(c *FpgaConfig) { c.Bitstream = "" }},
	{name: "bitstream in a subdirectory", edit: func(c *FpgaConfig) { c.Bitstream = "a/b/c.gbs" }},
	{name: "bitstream of 255 bytes", edit: func(c *FpgaConfig) { c.Bitstream = strings.Repeat("a", 255) }},
	{name: "bitstream with a leading dot", edit: func(c *FpgaConfig) { c.Bitstream = ".hidden.gbs" }},
	{name: "bitstreamRef instead of bitstream", edit: func(c *FpgaConfig) { c.Bitstream, c.BitstreamRef = "", testRef }},
	{name: "bitstreamRef without sha256", edit: func(c *FpgaConfig) { c.Bitstream, c.BitstreamRef, c.SHA256 = "", testRef, "" }},

	{name: "afuID missing", edit: func(c *FpgaConfig) { c.AFUID = "" },
		wantErr: []string{"afuID: Required value", `such as "d8424dc4a4a3c413f89e433683f9040b"`}},
	{name: "afuID missing with Never", edit: func(c *FpgaConfig) {
		*c = FpgaConfig{Programming: ProgrammingNever}
	}, wantErr: []string{"afuID: Required value"}},
	{name: "afuID too short", edit: func(c *FpgaConfig) { c.AFUID = "d8424dc4" },
		wantErr: []string{`afuID: Invalid value: "d8424dc4": has 8 hex digits, want 32`}},
	{name: "afuID not hex", edit: func(c *FpgaConfig) { c.AFUID = "z" + testAFUID[1:] },
		wantErr: []string{`afuID: Invalid value: "z`, "not a hex digit"}},
	{name: "afuID not canonical", edit: func(c *FpgaConfig) { c.AFUID = testAFUIDDashed },
		wantErr: []string{`afuID: Invalid value: "` + testAFUIDDashed + `": is not canonical: use "` + testAFUID + `"`}},
	{name: "afuID all f", edit: func(c *FpgaConfig) { c.AFUID = allF },
		wantErr: []string{"afuID: Invalid value", "unusable function"}},
	{name: "interfaceID invalid", edit: func(c *FpgaConfig) { c.InterfaceID = "69528db6" },
		wantErr: []string{`interfaceID: Invalid value: "69528db6"`}},
	{name: "interfaceID all f", edit: func(c *FpgaConfig) { c.InterfaceID = allF },
		wantErr: []string{"interfaceID: Invalid value", "unusable region"}},

	{name: "bitstream absolute", edit: func(c *FpgaConfig) { c.Bitstream = "/srv/intel.com/fpga/a.gbs" },
		wantErr: []string{`bitstream: Invalid value: "/srv/intel.com/fpga/a.gbs": must be relative`, `use "srv/intel.com/fpga/a.gbs"`}},
	{name: "bitstream escapes", edit: func(c *FpgaConfig) { c.Bitstream = "../../etc/shadow" },
		wantErr: []string{`bitstream: Invalid value: "../../etc/shadow": must not contain a ".." element`}},
	{name: "bitstream escapes in the middle", edit: func(c *FpgaConfig) { c.Bitstream = "a/../../b.gbs" },
		wantErr: []string{`bitstream: Invalid value`, `".."`}},
	{name: "bitstream with NUL", edit: func(c *FpgaConfig) { c.Bitstream = "a.gbs\x00.txt" },
		wantErr: []string{`bitstream: Invalid value: "a.gbs\x00.txt": must not contain control characters`}},
	{name: "bitstream with newline", edit: func(c *FpgaConfig) { c.Bitstream = "a\nb.gbs" },
		wantErr: []string{"bitstream: Invalid value", "control characters"}},
	{name: "bitstream not UTF-8", edit: func(c *FpgaConfig) { c.Bitstream = "a\xffb.gbs" },
		wantErr: []string{"bitstream: Invalid value", "valid UTF-8"}},
	{name: "bitstream too long", edit: func(c *FpgaConfig) { c.Bitstream = strings.Repeat("a", 256) },
		wantErr: []string{"bitstream: Too long: may not be more than 255 bytes"}},
	{name: "bitstream not clean", edit: func(c *FpgaConfig) { c.Bitstream = "./a//b.gbs" },
		wantErr: []string{`bitstream: Invalid value: "./a//b.gbs": must be a clean path to a file: use "a/b.gbs"`}},
	{name: "bitstream is a directory", edit: func(c *FpgaConfig) { c.Bitstream = "a/" },
		wantErr: []string{`bitstream: Invalid value: "a/"`, `use "a"`}},
	{name: "bitstream is the repository", edit: func(c *FpgaConfig) { c.Bitstream = "." },
		wantErr: []string{`bitstream: Invalid value: "."`, "not the repository itself"}},

	{name: "bitstreamRef with a tag only", edit: func(c *FpgaConfig) { c.Bitstream, c.BitstreamRef = "", "registry.example.com/accel/nlb0:v2" },
		wantErr: []string{`bitstreamRef: Invalid value: "registry.example.com/accel/nlb0:v2": has no digest`, "registry.example.com/accel/nlb0:v2@sha256:"}},
	{name: "bitstreamRef and bitstream", edit: func(c *FpgaConfig) { c.BitstreamRef = testRef },
		wantErr: []string{"bitstreamRef: Forbidden: bitstream and bitstreamRef exclude each other"}},
	{name: "bitstreamRef without registry", edit: func(c *FpgaConfig) { c.Bitstream, c.BitstreamRef = "", "accel/nlb0@sha256:"+testSHA256 },
		wantErr: []string{`bitstreamRef: Invalid value: "accel/nlb0@sha256:` + testSHA256 + `": does not start with a registry host`}},
	{name: "sha256 too short", edit: func(c *FpgaConfig) { c.SHA256 = testSHA256[:63] },
		wantErr: []string{`sha256: Invalid value: "` + testSHA256[:63] + `": must be 64 lowercase hex digits`}},
	{name: "sha256 uppercase", edit: func(c *FpgaConfig) { c.SHA256 = strings.ToUpper(testSHA256) },
		wantErr: []string{"sha256: Invalid value"}},
	{name: "sha256 with prefix", edit: func(c *FpgaConfig) { c.SHA256 = "sha256:" + testSHA256 },
		wantErr: []string{"sha256: Invalid value"}},

	{name: "programming not defaulted", edit: func(c *FpgaConfig) { c.Programming = "" },
		wantErr: []string{"programming: Required value", "Default sets IfNeeded"}},
	{name: "programming unknown", edit: func(c *FpgaConfig) { c.Programming = "always" },
		wantErr: []string{`programming: Unsupported value: "always": supported values: "IfNeeded", "Always", "Never"`}},
	{name: "Never with bitstream", edit: func(c *FpgaConfig) { c.Programming, c.SHA256 = ProgrammingNever, "" },
		wantErr: []string{"bitstream: Forbidden: must be empty when programming is Never"}},
	{name: "Never with sha256", edit: func(c *FpgaConfig) { c.Programming, c.Bitstream = ProgrammingNever, "" },
		wantErr: []string{"sha256: Forbidden: must be empty when programming is Never"}},
	{name: "Never with bitstreamRef", edit: func(c *FpgaConfig) {
		c.Programming, c.Bitstream, c.SHA256, c.BitstreamRef = ProgrammingNever, "", "", testRef
	}, wantErr: []string{"bitstreamRef: Forbidden: must be empty when programming is Never"}},
	{name: "Never with both", edit: func(c *FpgaConfig) { c.Programming = ProgrammingNever },
		wantErr: []string{"bitstream: Forbidden", "sha256: Forbidden"}},
	{name: "errors aggregate", edit: func(c *FpgaConfig) {
		*c = FpgaConfig{InterfaceID: "x", Bitstream: "/a", SHA256: "x", Programming: "x"}
	}, wantErr: []string{"afuID: Required", "interfaceID: Invalid", "bitstream: Invalid", "sha256: Invalid", "programming: Unsupported"}},
}

func TestValidate(t *testing.T) {
	for _, tc := range validateCases {
		t.Run(tc.name, func(t *testing.T) { checkValidate(t, tc) })
	}
}

// checkValidate applies tc.edit to a valid config and checks that Validate
// accepts it or reports every substring of tc.wantErr.
func checkValidate(t *testing.T, tc validateCase) {
	t.Helper()
	c := validConfig()
	tc.edit(c)
	err := c.Validate()
	if len(tc.wantErr) == 0 {
		if err != nil {
			t.Fatalf("Validate() error = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate() = nil, want errors containing %q", tc.wantErr)
	}
	for _, want := range tc.wantErr {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() error = %q\nwant it to contain %q", err, want)
		}
	}
}

func TestValidateFpgaConfigPath(t *testing.T) {
	base := field.NewPath("spec", "devices", "config").Index(0).Child("opaque", "parameters")
	errs := ValidateFpgaConfig(&FpgaConfig{Programming: ProgrammingAlways}, base)
	if len(errs) != 1 {
		t.Fatalf("ValidateFpgaConfig() = %v, want one error", errs)
	}
	if got, want := errs[0].Field, "spec.devices.config[0].opaque.parameters.afuID"; got != want {
		t.Errorf("error field = %q, want %q", got, want)
	}
	if got := ValidateFpgaConfig(validConfig(), base); len(got) != 0 {
		t.Errorf("ValidateFpgaConfig(valid) = %v, want none", got)
	}
}
