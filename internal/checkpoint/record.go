// Package checkpoint is the node's durable record of prepared claims: the
// payload (which claim holds which device, how far its preparation got)
// and the file that keeps it across restarts, kill -9 and torn writes.
//
// A Store is opened once (Open loads the file and recovers from damage)
// and saved to with Save, which returns once the record is on the disk;
// concurrent savers share one flush.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// ClaimPhase says how far preparation of a claim got.
type ClaimPhase string

const (
	// PhaseStarted: the claim holds its devices and programming was about
	// to start, is running or failed; no CDI spec was handed out.
	PhaseStarted ClaimPhase = "PrepareStarted"
	// PhaseCompleted: the CDI spec is written and was returned.
	PhaseCompleted ClaimPhase = "PrepareCompleted"
	// PhaseProgrammed: the regions were programmed before the claim's pod
	// was bound (binding conditions); the kubelet's prepare writes the
	// CDI spec.
	PhaseProgrammed ClaimPhase = "Programmed"
)

// knownPhase reports whether p is a phase this code writes.
func knownPhase(p ClaimPhase) bool {
	return p == PhaseStarted || p == PhaseCompleted || p == PhaseProgrammed
}

// Checkpoint is the driver's own record of prepared claims. It is this
// project's type, not a library's, so library changes never invalidate it.
type Checkpoint struct {
	// Version is the payload version it was read as or written in.
	Version int `json:"version"`
	// BootID is /proc/sys/kernel/random/boot_id when the checkpoint was
	// written: a different one means the node rebooted and every FPGA lost
	// the bitstreams claims had programmed.
	BootID string                  `json:"bootID"`
	Claims map[string]*ClaimRecord `json:"claims"` // by claim UID
}

// ClaimRecord is one claim the driver prepared (or is preparing).
type ClaimRecord struct {
	UID       string         `json:"uid"`
	Namespace string         `json:"namespace"`
	Name      string         `json:"name"`
	Phase     ClaimPhase     `json:"phase"`
	BootID    string         `json:"bootID"`
	Devices   []DeviceRecord `json:"devices"`
	// Renumbered are device nodes (cdi.NodeString) the holder's
	// containers may have been given by a CDI spec written before the
	// node's cards were enumerated anew, and that its devices no longer
	// have: such a container reaches, by that number, another port or
	// none. Kept until the holder is released.
	Renumbered []string `json:"renumbered,omitempty"`
}

// DeviceRecord is one device of a prepared claim.
type DeviceRecord struct {
	Device   string   `json:"device"`
	Requests []string `json:"requests,omitempty"`
	// AFUID is the accelerator function loaded for the claim.
	AFUID string `json:"afuID,omitempty"`
	// Programmed is true when this driver programmed the region for the
	// claim (so a reboot erased it).
	Programmed  bool   `json:"programmed,omitempty"`
	CDIDeviceID string `json:"cdiDeviceID,omitempty"`
	// Bitstream, SHA256 and LayerDigest say what this driver loaded for
	// the claim; LayerDigest keeps the OCI cache's copy of it held while
	// the claim is prepared.
	Bitstream   string `json:"bitstream,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	LayerDigest string `json:"layerDigest,omitempty"`
}

// New returns an empty checkpoint.
func New() *Checkpoint {
	return &Checkpoint{Version: Version, Claims: map[string]*ClaimRecord{}}
}

// validate checks the invariants the driver relies on.
func (cp *Checkpoint) validate() error {
	held := map[string]string{}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid {
			return fmt.Errorf("claim entry %q does not carry its own UID", uid)
		}
		if !knownPhase(c.Phase) {
			return fmt.Errorf("claim %s has unknown phase %q", uid, c.Phase)
		}
		for _, d := range c.Devices {
			if d.Device == "" {
				return fmt.Errorf("claim %s has a device without a name", uid)
			}
			if other, ok := held[d.Device]; ok {
				return fmt.Errorf("device %s is held by claims %s and %s", d.Device, other, uid)
			}
			held[d.Device] = uid
		}
	}
	return nil
}

// sanitized keeps the claims that are internally consistent: each device
// held once, known phases. What is dropped is reported by the caller.
func (cp *Checkpoint) sanitized() *Checkpoint {
	out := &Checkpoint{Version: cp.Version, BootID: cp.BootID, Claims: map[string]*ClaimRecord{}}
	held := map[string]bool{}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid || !knownPhase(c.Phase) {
			continue
		}
		if slices.ContainsFunc(c.Devices, func(d DeviceRecord) bool { return d.Device == "" || held[d.Device] }) {
			continue
		}
		for _, d := range c.Devices {
			held[d.Device] = true
		}
		out.Claims[uid] = c
	}
	return out
}

// Clone returns a deep copy, so that a save can encode it while the
// original changes.
func (cp *Checkpoint) Clone() *Checkpoint {
	out := &Checkpoint{Version: cp.Version, BootID: cp.BootID, Claims: make(map[string]*ClaimRecord, len(cp.Claims))}
	for uid, c := range cp.Claims {
		out.Claims[uid] = c.Clone()
	}
	return out
}

// Clone returns a deep copy of a record.
func (c *ClaimRecord) Clone() *ClaimRecord {
	cc := *c
	cc.Renumbered = slices.Clone(c.Renumbered)
	cc.Devices = make([]DeviceRecord, len(c.Devices))
	for i, d := range c.Devices {
		d.Requests = slices.Clone(d.Requests)
		cc.Devices[i] = d
	}
	return &cc
}

// Payload versions. A checkpoint is written in the lowest version that
// carries each of its records, so that the release before reads every
// checkpoint it can read whole and refuses the others untouched
// (ErrNewer) instead of taking what it does not know for damage:
//
//	2  {"version":2,"bootID":…,"claims":{…}} with started and completed
//	   records: what the release before Programmed records reads
//	3  adds Programmed records and a record's renumbered nodes
//
// Version 1, an envelope with a checksum of its own, was written only
// during development and is read as damage.
const (
	Version     = 3
	baseVersion = 2
)

var (
	// ErrCorrupt marks a checkpoint file that was damaged: a slot failed
	// its checksum, could not be decoded, or was missing.
	ErrCorrupt = errors.New("corrupt checkpoint")
	// ErrNewer marks a checkpoint written by a newer driver.
	ErrNewer = errors.New("checkpoint written by a newer driver")
)

// version is the first payload version that carries rec.
func (c *ClaimRecord) version() int {
	if c.Phase == PhaseProgrammed || len(c.Renumbered) > 0 {
		return 3
	}
	return baseVersion
}

// Encode renders a checkpoint payload in the lowest version that carries
// every record of cp.
func Encode(cp *Checkpoint) ([]byte, error) {
	out := *cp
	out.Version = baseVersion
	for _, rec := range cp.Claims {
		out.Version = max(out.Version, rec.version())
	}
	data, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return data, nil
}

// Decode parses a checkpoint payload. It fails with an error wrapping
// ErrNewer for a later version than Version and ErrCorrupt for anything
// undecodable. A payload that decodes but holds a device twice is
// returned sanitized together with an error wrapping ErrCorrupt.
func Decode(b []byte) (*Checkpoint, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	switch {
	case v.Version > Version:
		return nil, fmt.Errorf("%w: format version %d, this driver reads versions up to %d: upgrade the driver on this node to the release that wrote it or a newer one, or drain the node and move the file aside",
			ErrNewer, v.Version, Version)
	case v.Version < baseVersion:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v.Version)
	}
	cp := &Checkpoint{}
	if err := strictDecode(b, cp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if cp.Claims == nil {
		cp.Claims = map[string]*ClaimRecord{}
	}
	if err := cp.validate(); err != nil {
		return cp.sanitized(), fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return cp, nil
}

// strictDecode decodes one JSON object into v, refusing unknown fields
// and trailing data.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
