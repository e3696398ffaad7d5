package state

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// runPrepare runs a prepare operation that decidePrepare started: the
// jobs (runJobs), then the commit of what the holder got (complete).
func (s *State) runPrepare(logger klog.Logger, op *op, plans []*plan, superseded []types.UID, devs *discovery.Result) {
	h := op.holder
	logger = klog.LoggerWithValues(logger, "claim", klog.KRef(h.Namespace, h.Name))
	if err := s.holdLoaded(h.UID, plans); err != nil {
		err = fmt.Errorf("claim %s: %w", h, err)
		s.abandonJobs(op.jobs, err)
		s.finish(op, Outcome{}, err)
		return
	}
	if len(op.jobs) > 0 {
		if err := s.runJobs(logger, op, plans, superseded); err != nil {
			s.finish(op, op.out, err)
			return
		}
		superseded = nil // released with the started record
	}
	out, err := s.complete(logger, op, plans, superseded, devs)
	s.finish(op, out, err)
}

// runJobs records op's holder as started, releasing the holders it
// supersedes, then runs its jobs into op.out. A failed job leaves the
// started record: a later prepare programs again.
func (s *State) runJobs(logger klog.Logger, op *op, plans []*plan, superseded []types.UID) error {
	if err := s.recordStarted(logger, op.holder, plans, superseded); err != nil {
		s.abandonJobs(op.jobs, err)
		return err
	}
	s.step(StepStarted, op.holder.UID)
	s.removeSupersededSpecs(logger, superseded)
	for _, j := range op.jobs {
		go s.runJob(j)
	}
	var errs []error
	for _, j := range op.jobs {
		<-j.done
		op.out.Programmed = append(op.out.Programmed, j.result)
		if j.result.Err != nil {
			errs = append(errs, j.result.Err)
		}
	}
	return errors.Join(errs...)
}

// recordStarted commits h's record as started before its regions are
// programmed, replacing its earlier record (a completed one's CDI spec
// goes too) and releasing superseded holders.
func (s *State) recordStarted(logger klog.Logger, h Holder, plans []*plan, superseded []types.UID) error {
	s.mu.Lock()
	undo := s.undoRecords(append([]types.UID{h.UID}, superseded...))
	prev := s.book.cp.Claims[string(h.UID)]
	wasCompleted := prev != nil && prev.Phase == PhaseCompleted
	s.mu.Unlock()
	err := s.commit(func(cp *checkpoint.Checkpoint) {
		s.dropRecord(h.UID)
		for _, other := range superseded {
			s.dropRecord(other)
		}
		s.putRecord(s.record(h, PhaseStarted, plans))
	})
	if err != nil {
		if uerr := s.commit(undo); uerr != nil {
			logger.Error(uerr, "Undoing the record of a claim whose programming could not start failed; the next flush or a restart corrects it")
		}
		return fmt.Errorf("record claim %s before programming: %w", h, err)
	}
	if wasCompleted {
		if err := s.cfg.CDI.RemoveClaimSpec(string(h.UID)); err != nil {
			logger.Error(err, "Removing the CDI spec of the claim, programmed again, failed; the next start removes it unless the claim is prepared by then")
		}
	}
	return nil
}

// complete ends a prepare whose regions carry what it needs: before
// binding, it records the holder as programmed; else it writes the CDI
// spec, then commits the completed record (Restore removes a spec without
// one).
func (s *State) complete(logger klog.Logger, op *op, plans []*plan, superseded []types.UID, devs *discovery.Result) (Outcome, error) {
	h := op.holder
	s.mu.Lock()
	releasing := s.ops.releasing[h.UID]
	s.mu.Unlock()
	if op.beforeBinding {
		err := s.commit(func(cp *checkpoint.Checkpoint) {
			s.dropRecord(h.UID)
			s.putRecord(s.record(h, PhaseProgrammed, plans))
		})
		if err == nil && releasing {
			err = fmt.Errorf("%w: claim %s was unprepared while it was being programmed", ErrReleasing, h)
		}
		return op.out, err
	}
	if releasing {
		return op.out, fmt.Errorf("claim %s: %w: claim %s was unprepared while it was being prepared", h, ErrReleasing, h)
	}
	rec := s.record(h, PhaseCompleted, plans)
	ids, err := s.writeSpec(h, rec.Devices, devs)
	if err != nil {
		return op.out, fmt.Errorf("write CDI spec for claim %s: %w", h, err)
	}
	s.step(StepSpecWritten, h.UID)
	out := op.out
	for i := range rec.Devices {
		d := &rec.Devices[i]
		d.CDIDeviceID = ids[i]
		out.Devices = append(out.Devices, PreparedDevice{Device: d.Device, Requests: d.Requests, CDIDeviceIDs: []string{ids[i]}, AFUID: d.AFUID})
	}
	err = s.commit(func(cp *checkpoint.Checkpoint) {
		for _, other := range superseded {
			s.dropRecord(other)
		}
		s.dropRecord(h.UID)
		s.putRecord(rec)
	})
	s.removeSupersededSpecs(logger, superseded)
	if err != nil {
		return op.out, fmt.Errorf("record claim %s: %w", h, err)
	}
	s.step(StepPrepared, h.UID)
	logger.V(3).Info("Prepared claim", "devices", len(rec.Devices), "superseded", superseded)
	return out, nil
}

// removeSupersededSpecs removes the CDI specs of superseded holders once
// their release is recorded, and notifies.
func (s *State) removeSupersededSpecs(logger klog.Logger, superseded []types.UID) {
	if len(superseded) == 0 {
		return
	}
	defer s.notify()
	for _, other := range superseded {
		if err := s.cfg.CDI.RemoveClaimSpec(string(other)); err != nil {
			logger.Error(err, "Removing the CDI spec of a superseded holder failed; the next start removes it", "holder", other)
		}
	}
	s.mu.Lock()
	for _, other := range superseded {
		delete(s.specs.written, other)
		s.forgetVersion(other)
	}
	s.mu.Unlock()
}

// holdLoaded holds for uid, in the OCI cache, the layers the plans find
// loaded from their configs' references.
func (s *State) holdLoaded(uid types.UID, plans []*plan) error {
	for _, p := range plans {
		if p.Layer == "" || s.cfg.Registry == nil {
			continue
		}
		if err := s.cfg.Registry.Hold(string(uid), p.Layer); err != nil {
			return fmt.Errorf("hold the cached bitstream of device %s: %w", p.req.Device, err)
		}
	}
	return nil
}
