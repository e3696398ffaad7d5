package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// CheckpointVersion is the newest version of the checkpoint payload this
// code reads and writes: {"version":3,"bootID":…,"claims":{…}}, in a slot
// whose checksum is the only one (see CheckpointFile). Version 3 adds a
// record's renumbered nodes; a checkpoint with none is written as
// version 2 (checkpointVersionBase), which the releases before read as
// well. Loading refuses a later version with ErrNewerCheckpoint, leaving
// the file untouched (a downgrade after an upgrade is stopped, never
// guessed), and takes any other as damage. Version 1, an envelope with a
// checksum of its own, was written only during development, never by a
// release, and is not read: a node that has one recovers its claims from
// their CDI specs.
const CheckpointVersion = 3

// checkpointVersionBase is the version of a checkpoint no record of which
// has renumbered nodes.
const checkpointVersionBase = 2

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
	// Version is CheckpointVersion when written by this code.
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
	// none. Kept until the holder is released (RenumberedDevices).
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
	// the claim (see Programming); LayerDigest keeps the OCI cache's copy
	// of it held while the claim is prepared.
	Bitstream   string `json:"bitstream,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
	LayerDigest string `json:"layerDigest,omitempty"`
}

var (
	// ErrCorruptCheckpoint marks a checkpoint file that was damaged: a
	// slot failed its checksum, could not be decoded, or was missing.
	ErrCorruptCheckpoint = errors.New("corrupt checkpoint")
	// ErrNewerCheckpoint marks a checkpoint written by a newer driver.
	ErrNewerCheckpoint = errors.New("checkpoint written by a newer driver")
)

// newCheckpoint returns an empty checkpoint of the current version.
func newCheckpoint() *Checkpoint {
	return &Checkpoint{Version: CheckpointVersion, Claims: map[string]*ClaimRecord{}}
}

// EncodeCheckpoint renders a checkpoint payload in the current version.
func EncodeCheckpoint(cp *Checkpoint) ([]byte, error) {
	out := *cp
	out.Version = checkpointVersionBase
	for _, rec := range cp.Claims {
		if len(rec.Renumbered) > 0 {
			out.Version = CheckpointVersion
		}
	}
	data, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	return data, nil
}

// DecodeCheckpoint parses a checkpoint payload. It fails with an error
// wrapping ErrNewerCheckpoint for a later version and ErrCorruptCheckpoint
// for anything undecodable. A payload that decodes but holds a device
// twice is returned sanitized (see sanitized) together with an error
// wrapping ErrCorruptCheckpoint.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
	}
	cp := &Checkpoint{}
	switch {
	case v.Version > CheckpointVersion:
		return nil, fmt.Errorf("%w: format version %d, this driver reads versions up to %d: run that driver release or a newer one on this node, or drain the node and remove the checkpoint",
			ErrNewerCheckpoint, v.Version, CheckpointVersion)
	case v.Version == CheckpointVersion, v.Version == checkpointVersionBase:
		if err := strictDecode(b, cp); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
		}
	default:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrCorruptCheckpoint, v.Version)
	}
	cp.Version = CheckpointVersion
	if cp.Claims == nil {
		cp.Claims = map[string]*ClaimRecord{}
	}
	if err := cp.validate(); err != nil {
		return cp.sanitized(), fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
	}
	return cp, nil
}

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
		ok := true
		for _, d := range c.Devices {
			if d.Device == "" || held[d.Device] {
				ok = false
			}
		}
		if !ok {
			continue
		}
		for _, d := range c.Devices {
			held[d.Device] = true
		}
		out.Claims[uid] = c
	}
	return out
}

// clone returns a deep copy, so a save can encode outside the state's lock.
func (cp *Checkpoint) clone() *Checkpoint {
	out := &Checkpoint{Version: cp.Version, BootID: cp.BootID, Claims: make(map[string]*ClaimRecord, len(cp.Claims))}
	for uid, c := range cp.Claims {
		out.Claims[uid] = c.clone()
	}
	return out
}

// clone returns a deep copy of a record.
func (c *ClaimRecord) clone() *ClaimRecord {
	cc := *c
	cc.Renumbered = slices.Clone(c.Renumbered)
	cc.Devices = make([]DeviceRecord, len(c.Devices))
	for i, d := range c.Devices {
		d.Requests = append([]string(nil), d.Requests...)
		cc.Devices[i] = d
	}
	return &cc
}
