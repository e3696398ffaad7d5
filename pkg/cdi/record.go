package cdi

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// RecordedSpec is what a claim spec says about the hold it was written
// for.
type RecordedSpec struct {
	// UID is the claim's (or holder's) UID.
	UID     string
	Devices []RecordedDevice
}

// RecordedDevice is one device of a RecordedSpec.
type RecordedDevice struct {
	// Name is the DRA device name.
	Name string
	// AFUID is the accelerator function the spec hands over with the
	// device (its entry in FPGA_AFU_IDS; empty when unknown).
	AFUID       string
	CDIDeviceID string
	// Nodes are the device nodes the spec gives a container with the
	// device (NodeString).
	Nodes []string
}

// NodeString describes a device node a container is given: its path in
// the container and its device number ("/dev/dfl-port.0 508:0").
func NodeString(path string, major, minor int64) string {
	return fmt.Sprintf("%s %d:%d", path, major, minor)
}

// ReadClaimSpec reads the spec of one claim back into what it records; a
// missing spec is an error wrapping os.ErrNotExist.
func (w *Writer) ReadClaimSpec(claimUID string) (RecordedSpec, error) {
	if err := validateClaimUID(claimUID); err != nil {
		return RecordedSpec{}, err
	}
	return w.readClaimSpec(claimUID)
}

// ReadClaimSpecs reads every claim spec in the directory (see
// ListClaimSpecs) back into what it records. A spec that cannot be read or
// names no device is reported in errs and left where it is.
func (w *Writer) ReadClaimSpecs() (specs []RecordedSpec, errs []error) {
	uids, err := w.ListClaimSpecs()
	if err != nil {
		return nil, []error{err}
	}
	for _, uid := range uids {
		r, err := w.readClaimSpec(uid)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		specs = append(specs, r)
	}
	return specs, errs
}

// readClaimSpec reads the spec of one claim: its devices are named
// "<claimUID>-<device>", in the order of the FPGA_AFU_IDS entries.
func (w *Writer) readClaimSpec(uid string) (RecordedSpec, error) {
	path := w.specPath(uid)
	b, err := os.ReadFile(path)
	if err != nil {
		return RecordedSpec{}, fmt.Errorf("read CDI spec %s: %w", path, err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return RecordedSpec{}, fmt.Errorf("CDI spec %s: %w", path, err)
	}
	var afuIDs []string
	for _, e := range spec.ContainerEdits.Env {
		if v, ok := strings.CutPrefix(e, EnvAFUIDs+"="); ok {
			afuIDs = strings.Split(v, ",")
		}
	}
	r := RecordedSpec{UID: uid}
	for i, d := range spec.Devices {
		name, ok := strings.CutPrefix(d.Name, uid+"-")
		if !ok || name == "" {
			return RecordedSpec{}, fmt.Errorf("CDI spec %s: device %q is not named after claim %s", path, d.Name, uid)
		}
		rd := RecordedDevice{Name: name, CDIDeviceID: w.deviceID(uid, name)}
		if len(afuIDs) == len(spec.Devices) {
			rd.AFUID = afuIDs[i]
		}
		for _, n := range d.ContainerEdits.DeviceNodes {
			if n != nil {
				rd.Nodes = append(rd.Nodes, NodeString(n.Path, n.Major, n.Minor))
			}
		}
		r.Devices = append(r.Devices, rd)
	}
	if len(r.Devices) == 0 {
		return RecordedSpec{}, fmt.Errorf("CDI spec %s names no device", path)
	}
	return r, nil
}
