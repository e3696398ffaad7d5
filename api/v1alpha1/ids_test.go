package v1alpha1

import (
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// TestCanonicalIDMatchesDiscovery pins this package's copy of the ID rules to
// the node's: both must accept the same IDs and canonicalise them alike.
func TestCanonicalIDMatchesDiscovery(t *testing.T) {
	for _, in := range []string{
		testAFUID,
		testAFUIDDashed,
		"0x" + testAFUID,
		" " + testAFUID + "\n",
		"0X" + testAFUID,
		testAFUID[:31],
		testAFUID + "0",
		"g" + testAFUID[1:],
		"",
		"-",
		"0x",
		"{" + testAFUIDDashed + "}",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
	} {
		got, gotErr := canonicalID(in)
		want, wantErr := discovery.CanonicalID(in)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("canonicalID(%q) = %q, %v; discovery.CanonicalID = %q, %v", in, got, gotErr, want, wantErr)
		}
	}
}
