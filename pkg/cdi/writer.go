package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// specDirMode is the mode of a spec directory the Writer creates.
const specDirMode os.FileMode = 0o755

// Writer writes, lists and removes the CDI spec files of prepared claims in
// one directory, one file per claim, named "<vendor>-<class>_<claimUID>.json"
// (the CDI library's transient spec name). A Writer is safe for concurrent
// use; concurrent writes of the same claim leave one complete spec.
type Writer struct {
	vendor string
	class  string
	dir    string
	// rename is os.Rename; tests replace it to make a write fail late.
	rename func(oldpath, newpath string) error
	// syncDir is atomicfile.SyncDir; tests replace it to see what a
	// crash of the kernel would keep.
	syncDir func(dir string) error
}

// NewWriter returns a Writer for CDI devices "<vendor>/<class>=<name>"
// (e.g. vendor "fpga.dra.dev", class "port") with specs in dir, which it
// creates with mode 0755 when missing. It does not check that the container
// runtime reads dir.
func NewWriter(vendor, class, dir string) (*Writer, error) {
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI vendor %q: %w", vendor, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("CDI class %q: %w", class, err)
	}
	if dir == "" {
		return nil, errors.New("CDI spec directory is empty: pass the directory the container runtime reads, e.g. /var/run/cdi")
	}
	if err := os.MkdirAll(dir, specDirMode); err != nil {
		return nil, fmt.Errorf("create CDI spec directory: %w", err)
	}
	return &Writer{vendor: vendor, class: class, dir: dir, rename: os.Rename, syncDir: atomicfile.SyncDir}, nil
}

// WriteClaimSpec writes the spec of a claim, replacing any earlier one, and
// returns the CDI device IDs of devices: ids[i] is the ID of devices[i]. The
// spec is checked with the CDI library's own parser and validation before it
// replaces the old one, so a spec a runtime would reject is never installed.
// It fails, leaving any earlier spec in place, when claimUID is not a UID,
// devices is empty, names a device twice, or holds a device NewDevice
// rejected.
//
// The spec is written atomically but not flushed to the disk: after a
// crash the driver rebuilds specs from its checkpoint. What it holds (the
// claim's UID in its file and device names, each device's name and AFU
// ID) is evidence of the hold should the checkpoint be lost
// (ReadClaimSpecs).
func (w *Writer) WriteClaimSpec(claimUID string, devices []Device) ([]string, error) {
	if err := validateClaimUID(claimUID); err != nil {
		return nil, err
	}
	spec, ids, err := w.buildSpec(claimUID, devices)
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("claim %s: encode CDI spec: %w", claimUID, err)
	}
	data = append(data, '\n')

	if err := os.MkdirAll(w.dir, specDirMode); err != nil {
		return nil, fmt.Errorf("claim %s: create CDI spec directory: %w", claimUID, err)
	}
	path := w.specPath(claimUID)
	check := func(tmpPath string) error {
		if _, err := cdiapi.ReadSpec(tmpPath, 0); err != nil {
			return fmt.Errorf("invalid CDI spec: %w", err)
		}
		return nil
	}
	if err := w.writeFileAtomic(path, data, check); err != nil {
		return nil, fmt.Errorf("claim %s: write CDI spec: %w", claimUID, err)
	}
	return ids, nil
}

// RemoveClaimSpec removes the spec of a claim, durably, and any temporary
// file an interrupted write of it left behind. A missing spec is not an
// error.
func (w *Writer) RemoveClaimSpec(claimUID string) error {
	if err := validateClaimUID(claimUID); err != nil {
		return err
	}
	path := w.specPath(claimUID)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("claim %s: remove CDI spec: %w", claimUID, err)
	}
	// Flush the removal (also when an earlier call removed the spec but
	// failed to flush) before the caller records the release: a spec back
	// from a crash of the kernel would otherwise be taken, after a torn
	// checkpoint save, for a claim still prepared. A directory that is
	// gone holds no spec.
	if err := w.syncDir(w.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("claim %s: CDI spec removed but not durably: %w", claimUID, err)
	}
	if err := atomicfile.RemoveStale(path); err != nil {
		return fmt.Errorf("claim %s: %w", claimUID, err)
	}
	return nil
}

// ClaimSpecExists reports whether the spec of a claim is in place.
func (w *Writer) ClaimSpecExists(claimUID string) (bool, error) {
	if err := validateClaimUID(claimUID); err != nil {
		return false, err
	}
	_, err := os.Stat(w.specPath(claimUID))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("claim %s: stat CDI spec: %w", claimUID, err)
}

// ListClaimSpecs returns the UIDs of the claims that have a spec in the
// directory, sorted, so that the driver can remove the specs of claims it no
// longer prepares. Files of other vendors or classes, temporary files and
// directories are ignored. A missing directory holds no specs.
func (w *Writer) ListClaimSpecs() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list CDI specs: %w", err)
	}
	prefix := w.specPrefix()
	var uids []string
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		uid, ok = strings.CutSuffix(uid, specExt)
		if !ok || validateClaimUID(uid) != nil {
			continue
		}
		uids = append(uids, uid)
	}
	return uids, nil
}

// SpecPath is the path of a claim's spec file.
func (w *Writer) SpecPath(claimUID string) string { return w.specPath(claimUID) }

// specPath is the path of a claim's spec file.
func (w *Writer) specPath(claimUID string) string {
	return filepath.Join(w.dir, w.specFileName(claimUID))
}
