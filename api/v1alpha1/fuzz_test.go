package v1alpha1

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeFpgaConfig checks that decoding never panics, that Default is
// idempotent, and that a config that decodes and validates re-encodes to JSON
// that decodes and validates to the same config.
func FuzzDecodeFpgaConfig(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"` + testAFUIDDashed + `"}`,
		`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"` + testAFUID + `","interfaceID":"` +
			testInterfaceID + `","bitstream":"a/b.gbs","sha256":"` + testSHA256 + `","programming":"Always"}`,
		"apiVersion: fpga.dra.dev/v1alpha1\nkind: FpgaConfig\nafuID: " + testAFUID + "\nprogramming: Never\n",
		`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"` + testAFUID + `","bitstreamRef":"` + testRef + `"}`,
		`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"` + testAFUID + `","bitstreamRef":"localhost:5000/a:b"}`,
		"---\napiVersion: fpga.dra.dev/v1alpha1\nkind: FpgaConfig\nbitstream: \"a\\x00\"\n---\n",
		`{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"a","afuID":"b"}`,
		`{"apiVersion":"v1","kind":"Pod"}`,
		"[]",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := Decode(raw)
		if err != nil {
			if cfg != nil {
				t.Fatalf("Decode() = %+v and error %v, want nil with an error", cfg, err)
			}
			return
		}
		cfg.Default()
		again := cfg.DeepCopy()
		again.Default()
		if diff := cmp.Diff(cfg, again); diff != "" {
			t.Fatalf("Default() is not idempotent (-once +twice):\n%s", diff)
		}

		validateErr := cfg.Validate()
		valid, err := DecodeAndValidate(raw)
		if (validateErr == nil) != (err == nil) {
			t.Fatalf("Validate() = %v but DecodeAndValidate() = %v", validateErr, err)
		}
		if err != nil {
			return
		}
		if diff := cmp.Diff(cfg, valid); diff != "" {
			t.Fatalf("DecodeAndValidate() differs from Decode+Default (-want +got):\n%s", diff)
		}

		encoded, err := json.Marshal(valid)
		if err != nil {
			t.Fatalf("json.Marshal(%+v) error = %v", valid, err)
		}
		decoded, err := DecodeAndValidate(encoded)
		if err != nil {
			t.Fatalf("DecodeAndValidate(%s) of a re-encoded valid config error = %v", encoded, err)
		}
		if diff := cmp.Diff(valid, decoded); diff != "" {
			t.Fatalf("re-encoded config decodes differently (-want +got):\n%s", diff)
		}
	})
}
