package extresource_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
)

// The Intel FPGA device plugin's test fixture names.
const (
	intelDomain   = "fpga.intel.com"
	fixtureAF0    = "af-695.d84.aVKNtusxV3qMNmj5-qCB9thCTcSko8QT-J5DNoP5BAs"
	fixtureAF1    = "af-695.f7d.aVKNtusxV3qMNmj5-qCB9vffQFy9es9yIvFEsLk6zRg"
	fixtureRegion = "region-69528db6eb31577a8c3668f9faa081f6"
)

// TestResourceNamesFixture: the Intel FPGA device plugin's own fixture
// comes out byte for byte.
func TestResourceNamesFixture(t *testing.T) {
	for _, tc := range []struct{ ifID, afuID, want string }{
		{"69528db6eb31577a8c3668f9faa081f6", "d8424dc4a4a3c413f89e433683f9040b", fixtureAF0},
		{"69528db6eb31577a8c3668f9faa081f6", "f7df405cbd7acf7222f144b0b93acd18", fixtureAF1},
		// Dashed and upper-case IDs are canonicalised first.
		{"69528DB6-EB31-577A-8C36-68F9FAA081F6", "d8424dc4-a4a3-c413-f89e-433683f9040b", fixtureAF0},
	} {
		got, err := extresource.AFName(tc.ifID, tc.afuID)
		if err != nil || got != tc.want {
			t.Errorf("AFName(%s, %s) = %q, %v; want %q", tc.ifID, tc.afuID, got, err, tc.want)
		}
	}
	got, err := extresource.RegionName("69528db6eb31577a8c3668f9faa081f6")
	if err != nil || got != fixtureRegion {
		t.Errorf("RegionName = %q, %v; want %q", got, err, fixtureRegion)
	}
}

func TestResourceNamesRejectBadIDs(t *testing.T) {
	for _, tc := range []struct{ ifID, afuID string }{
		{"", "d8424dc4a4a3c413f89e433683f9040b"},
		{"69528db6eb31577a8c3668f9faa081f6", "d8424dc4"},
		{"69528db6eb31577a8c3668f9faa081fg", "d8424dc4a4a3c413f89e433683f9040b"},
	} {
		if got, err := extresource.AFName(tc.ifID, tc.afuID); err == nil {
			t.Errorf("AFName(%q, %q) = %q, want an error", tc.ifID, tc.afuID, got)
		}
	}
	if got, err := extresource.RegionName("6952"); err == nil {
		t.Errorf("RegionName(6952) = %q, want an error", got)
	}
}

// TestResourceNamesAreQualifiedNames: whatever the IDs, the full names are
// valid extended resource names (the kubelet refuses others): the base64
// of 32 bytes ends in a character that encodes 4 bits, never '-' or '_'.
func TestResourceNamesAreQualifiedNames(t *testing.T) {
	for i := 0; i < 2000; i++ {
		b := make([]byte, 32)
		rand.Read(b)
		if i == 0 {
			for j := range b {
				b[j] = 0xff
			}
		}
		name, err := extresource.AFName(hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:]))
		if err != nil {
			t.Fatal(err)
		}
		region, err := extresource.RegionName(hex.EncodeToString(b[:16]))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{name, region} {
			if errs := validation.IsQualifiedName(intelDomain + "/" + n); len(errs) > 0 {
				t.Fatalf("%s/%s is not a qualified name: %v", intelDomain, n, errs)
			}
		}
	}
}
