// Package checkpoint is the node's durable record of prepared claims: the
// payload (which claim holds which device, how far its preparation got)
// and the file that keeps it across restarts, kill -9 and torn writes.
//
// A Store is opened once (Open loads the file and recovers from damage)
// and saved to with Save, which returns once the record is on the disk;
// concurrent savers share one flush.
package checkpoint

import (
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
