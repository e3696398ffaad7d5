package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// CheckpointVersion is the version of the on-disk format this code writes.
// Loading accepts this version only; a newer file is refused rather than
// misread (a downgrade after an upgrade is reported, not guessed).
const CheckpointVersion = 1

// ClaimPhase says how far preparation of a claim got.
type ClaimPhase string

const (
	// PhaseStarted: the claim holds its devices; programming may be
	// running or may have failed; no CDI spec was handed out.
	PhaseStarted ClaimPhase = "PrepareStarted"
	// PhaseCompleted: the CDI spec is written and was returned.
	PhaseCompleted ClaimPhase = "PrepareCompleted"
)

// Checkpoint is the driver's own record of prepared claims. It is this
// project's type, not a library's, so library changes never invalidate it.
type Checkpoint struct {
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
}

// envelope is the file: the payload's exact bytes and their checksum.
type envelope struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"` // sha256 of Data as stored
	Data     json.RawMessage `json:"data"`
}

// ErrCorruptCheckpoint marks a checkpoint that failed its checksum or could
// not be decoded.
var ErrCorruptCheckpoint = errors.New("corrupt checkpoint")

// EncodeCheckpoint renders a checkpoint file.
func EncodeCheckpoint(cp *Checkpoint) ([]byte, error) {
	data, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint: %w", err)
	}
	sum := sha256.Sum256(data)
	// Compact on purpose: indenting would re-format Data and break the sum.
	return json.Marshal(envelope{Version: CheckpointVersion, Checksum: hex.EncodeToString(sum[:]), Data: data})
}

// DecodeCheckpoint parses a checkpoint file. On a checksum mismatch it still
// returns what the payload decodes to (so the caller can recover claims)
// together with an error wrapping ErrCorruptCheckpoint.
func DecodeCheckpoint(b []byte) (*Checkpoint, error) {
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
	}
	if env.Version != CheckpointVersion {
		return nil, fmt.Errorf("checkpoint version %d is not %d: written by another version of the driver", env.Version, CheckpointVersion)
	}
	cp := &Checkpoint{}
	decodeErr := json.Unmarshal(env.Data, cp)
	sum := sha256.Sum256(env.Data)
	if hex.EncodeToString(sum[:]) != env.Checksum {
		if decodeErr != nil {
			return nil, fmt.Errorf("%w: checksum mismatch and payload undecodable: %v", ErrCorruptCheckpoint, decodeErr)
		}
		return cp.sanitized(), fmt.Errorf("%w: checksum mismatch", ErrCorruptCheckpoint)
	}
	if decodeErr != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptCheckpoint, decodeErr)
	}
	if err := cp.validate(); err != nil {
		return cp.sanitized(), fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
	}
	return cp, nil
}

// validate checks the invariants the driver relies on.
func (cp *Checkpoint) validate() error {
	held := map[string]string{}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid {
			return fmt.Errorf("claim entry %q does not carry its own UID", uid)
		}
		if c.Phase != PhaseStarted && c.Phase != PhaseCompleted {
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
	out := &Checkpoint{BootID: cp.BootID, Claims: map[string]*ClaimRecord{}}
	held := map[string]bool{}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid || (c.Phase != PhaseStarted && c.Phase != PhaseCompleted) {
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

// copyCheckpoint returns a deep copy, so a save can encode outside the
// state's lock.
func copyCheckpoint(cp *Checkpoint) (*Checkpoint, error) {
	out := &Checkpoint{BootID: cp.BootID, Claims: make(map[string]*ClaimRecord, len(cp.Claims))}
	for uid, c := range cp.Claims {
		cc := *c
		cc.Devices = append([]DeviceRecord(nil), c.Devices...)
		out.Claims[uid] = &cc
	}
	return out, nil
}
