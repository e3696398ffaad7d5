package state

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// RestoreReport says what Restore found and did.
type RestoreReport struct {
	Damage    string   // why the checkpoint was damaged at start, if it was
	Recovered []Holder // holds rebuilt from CDI specs
	Kept      []error  // why CDI specs were neither used nor removed
	Removed   []string // UIDs whose spec a sound checkpoint did not know
}

// Restore makes the node match the checkpoint after a (re)start, before
// the kubelet can call. With a damaged checkpoint, the CDI spec of a
// holder it does not have as completed rebuilds the hold and no spec is
// removed; with a sound one, such specs are removed. The CDI spec of every
// completed holder is rewritten.
func (s *State) Restore(ctx context.Context, devs *discovery.Result) (RestoreReport, error) {
	logger := klog.FromContext(ctx)
	report := RestoreReport{Damage: s.book.damaged}
	var errs []error
	if s.book.damaged != "" {
		logger.Error(nil, "CHECKPOINT DAMAGED: rebuilding holds from CDI specs; no spec is removed until the next start with a sound checkpoint", "damage", s.book.damaged)
		specs, readErrs := s.cfg.CDI.ReadClaimSpecs()
		for _, err := range readErrs {
			report.Kept = append(report.Kept, err)
			logger.Error(err, "CDI spec kept but not used: it cannot be read")
		}
		if err := s.recoverFromSpecs(logger, specs, devs, &report); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	var completed []*ClaimRecord
	for _, rec := range s.book.cp.Claims {
		for _, d := range rec.Devices {
			if d.LayerDigest != "" && s.cfg.Registry != nil {
				if err := s.cfg.Registry.Hold(rec.UID, d.LayerDigest); err != nil {
					errs = append(errs, fmt.Errorf("claim %s: %w", rec.UID, err))
				}
			}
		}
		if rec.BootID != s.bootID {
			logger.Info("Node rebooted since claim was prepared: regions programmed for it are programmed again at its next prepare", "claim", klog.KRef(rec.Namespace, rec.Name), "uid", rec.UID)
		}
		if rec.Phase == PhaseCompleted {
			completed = append(completed, rec.Clone())
		}
	}
	s.mu.Unlock()
	for _, rec := range completed {
		h := Holder{UID: types.UID(rec.UID), Namespace: rec.Namespace, Name: rec.Name}
		// The spec still there is what running containers were given.
		if granted, ok := s.grantedOnDisk(rec); ok {
			if err := s.noteGone(logger, h, granted, rec.Devices, devs); err != nil {
				errs = append(errs, fmt.Errorf("record the renumbered devices of claim %s: %w", h, err))
			}
		}
		if _, err := s.writeSpec(h, rec.Devices, devs); err != nil {
			errs = append(errs, fmt.Errorf("restore CDI spec of claim %s: %w", h, err))
		}
	}
	if s.book.damaged == "" {
		uids, err := s.cfg.CDI.ListClaimSpecs()
		if err != nil {
			errs = append(errs, err)
		}
		for _, uid := range uids {
			if rec, ok := s.Claim(types.UID(uid)); ok && rec.Phase == PhaseCompleted {
				continue
			}
			logger.Info("Removing CDI spec of a holder the checkpoint does not have as prepared", "uid", uid)
			if err := s.cfg.CDI.RemoveClaimSpec(uid); err != nil {
				errs = append(errs, err)
				continue
			}
			report.Removed = append(report.Removed, uid)
		}
	}
	return report, errors.Join(errs...)
}

// recoverFromSpecs rebuilds and records, from their CDI specs, the holds
// of holders the damaged checkpoint does not have as completed (a spec is
// written only when a prepare completes); one naming a device another
// completed holder holds is kept and reported.
func (s *State) recoverFromSpecs(logger klog.Logger, specs []cdi.RecordedSpec, devs *discovery.Result, report *RestoreReport) error {
	s.mu.Lock()
	// Always saved: it replaces the damaged file.
	gen := s.update(func(*checkpoint.Checkpoint) {})
	for _, spec := range specs {
		old := s.book.cp.Claims[spec.UID]
		if old != nil && old.Phase == PhaseCompleted {
			continue
		}
		rec, displaced, err := s.recordFromSpec(spec, old, devs)
		if err != nil {
			report.Kept = append(report.Kept, err)
			logger.Error(err, "CDI spec kept but not used")
			continue
		}
		var gone []string
		for _, other := range displaced {
			gone = append(gone, fmt.Sprintf("%s (%s)", s.holderName(other), s.book.cp.Claims[string(other)].Phase))
		}
		gen = s.update(func(cp *checkpoint.Checkpoint) {
			for _, other := range displaced {
				s.dropRecord(other)
			}
			s.dropRecord(types.UID(rec.UID))
			cp.Claims[rec.UID] = rec
			for _, d := range rec.Devices {
				s.holds[d.Device] = types.UID(rec.UID)
			}
		})
		h := Holder{UID: types.UID(rec.UID), Namespace: rec.Namespace, Name: rec.Name}
		report.Recovered = append(report.Recovered, h)
		had := "nothing of it"
		if old != nil {
			had = "it only as " + string(old.Phase)
		}
		logger.Error(nil, "RECOVERED a prepared claim from its CDI spec: the damaged checkpoint had "+had+"; its devices stay held until the kubelet unprepares it",
			"uid", rec.UID, "devices", deviceNames(rec.Devices), "spec", s.cfg.CDI.SpecPath(rec.UID), "sameBoot", rec.BootID == s.bootID, "gaveWay", gone)
	}
	s.mu.Unlock()
	if err := s.sync(gen); err != nil {
		return fmt.Errorf("record claims recovered from CDI specs: %w", err)
	}
	return nil
}

// recordFromSpec is the completed record of spec's holder: devices from
// the spec, the rest from old, its earlier record, if any. With old, the
// spec is used only when every region holds the spec's AFU. A completed
// holder of one of its devices makes the spec unusable; another one gives
// way (displaced). Caller holds mu.
func (s *State) recordFromSpec(spec cdi.RecordedSpec, old *ClaimRecord, devs *discovery.Result) (rec *ClaimRecord, displaced []types.UID, err error) {
	rec = &ClaimRecord{UID: spec.UID, Phase: PhaseCompleted}
	if old != nil {
		rec = old.Clone()
		rec.Phase, rec.Devices = PhaseCompleted, nil
	}
	loaded := true
	for _, d := range spec.Devices {
		if other, held := s.holds[d.Name]; held && other != types.UID(spec.UID) {
			if o := s.book.cp.Claims[string(other)]; o == nil || o.Phase == PhaseCompleted {
				return nil, nil, fmt.Errorf("CDI spec of %s names device %s, which the checkpoint has %s hold; the spec is kept and the device stays with %s", spec.UID, d.Name, s.holderName(other), s.holderName(other))
			}
			if !slices.Contains(displaced, other) {
				displaced = append(displaced, other)
			}
		}
		dr := DeviceRecord{Device: d.Name}
		if old != nil {
			if i := slices.IndexFunc(old.Devices, func(o DeviceRecord) bool { return o.Device == d.Name }); i >= 0 {
				dr = old.Devices[i]
			}
		}
		dr.AFUID, dr.CDIDeviceID = d.AFUID, d.CDIDeviceID
		rec.Devices = append(rec.Devices, dr)
		if _, port, ok := devs.FindPort(d.Name); !ok || d.AFUID == "" || port.AFUID != d.AFUID {
			loaded = false
		}
	}
	switch {
	case old != nil && !loaded:
		return nil, nil, fmt.Errorf("CDI spec of %s hands over AFUs %v that its regions no longer hold: the spec is older than the claim's %s record, which stands (its next prepare decides again); the spec is kept until a start with a sound checkpoint removes it", spec.UID, specAFUs(spec), old.Phase)
	case old == nil && loaded:
		rec.BootID = s.bootID
	}
	return rec, displaced, nil
}

// specAFUs lists the AFUs a spec hands over, one per device.
func specAFUs(spec cdi.RecordedSpec) []string {
	afus := make([]string, len(spec.Devices))
	for i, d := range spec.Devices {
		afus[i] = d.AFUID
	}
	return afus
}

// grantedOnDisk returns the device nodes rec's CDI spec on the disk gives
// a container, when there is one written in this boot.
func (s *State) grantedOnDisk(rec *ClaimRecord) ([]string, bool) {
	if rec.BootID != s.bootID {
		return nil, false
	}
	spec, err := s.cfg.CDI.ReadClaimSpec(rec.UID)
	if err != nil {
		return nil, false
	}
	var granted []string
	for _, d := range spec.Devices {
		granted = append(granted, d.Nodes...)
	}
	return granted, true
}
