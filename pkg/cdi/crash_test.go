package cdi

import (
	"slices"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// TestRemoveClaimSpecSurvivesKernelCrash: once RemoveClaimSpec returned
// (and the driver then saved the claim's release durably), a crash of the
// kernel must not bring the spec back: after a torn checkpoint save the
// restart takes every spec it finds for evidence of a prepared claim. The
// directory a crash leaves is modelled as its listing at its last flush.
func TestRemoveClaimSpecSurvivesKernelCrash(t *testing.T) {
	root := t.TempDir()
	w, err := NewWriter(testVendor, testClass, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var durable []string
	flushed := func() {
		uids, err := w.ListClaimSpecs()
		if err != nil {
			t.Fatal(err)
		}
		durable = uids
	}
	w.syncDir = func(dir string) error {
		if dir == w.dir {
			flushed()
		}
		return atomicfile.SyncDir(dir)
	}
	if _, err := w.WriteClaimSpec(testClaimUID, testDevices(testCard(root), testAFUID0)); err != nil {
		t.Fatal(err)
	}
	flushed() // the file system committed the new spec on its own
	if err := w.RemoveClaimSpec(testClaimUID); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(durable, testClaimUID) {
		t.Fatalf("RemoveClaimSpec returned but the removal of %s is not flushed: a kernel crash brings the spec back", w.SpecPath(testClaimUID))
	}
}
