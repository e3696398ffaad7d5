package state

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// ProgramHeld loads afuID into the region behind device for uid, which
// holds it (the legacy endpoint's hook), as a config with programming
// IfNeeded does, and records it. It fails with ErrNotHeld unless uid holds
// device, ErrReleasing while uid is released, and ErrInProgress when ctx
// ends first (the job goes on).
func (s *State) ProgramHeld(ctx context.Context, uid types.UID, device, interfaceID, afuID string, devs *discovery.Result) (Programming, error) {
	res := Programming{Device: device, AFUID: afuID}
	j, started, err := s.decideProgramHeld(uid, device, interfaceID, afuID, devs)
	switch {
	case err != nil:
		return res, err
	case j == nil: // loaded and recorded
		if err := s.durable(); err != nil {
			return res, fmt.Errorf("record AFU %s of device %s: %w", afuID, device, err)
		}
		return res, nil
	}
	if started {
		go s.runJob(j)
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		return res, fmt.Errorf("%w: device %s is being programmed with AFU %s; the call was cancelled: %v", ErrInProgress, device, afuID, context.Cause(ctx))
	}
	return j.result, j.result.Err
}

// decideProgramHeld is ProgramHeld's critical section: it checks the hold
// and returns the job to wait for (nil when nothing must be loaded);
// started says j is new and must be run.
func (s *State) decideProgramHeld(uid types.UID, device, interfaceID, afuID string, devs *discovery.Result) (j *job, started bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.drainingError("programming of "+device+" for", s.holderName(uid)); err != nil {
		return nil, false, err
	}
	holder, held := s.holds[device]
	rec := s.book.cp.Claims[string(uid)]
	idx := -1
	if rec != nil {
		idx = slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == device })
	}
	switch {
	case !held:
		return nil, false, fmt.Errorf("%w: device %s is not prepared for anyone; only a device allocated to %s can be programmed for it", ErrNotHeld, device, uid)
	case holder != uid || idx < 0:
		return nil, false, fmt.Errorf("%w: device %s is prepared for %s, not for %s", ErrNotHeld, device, s.holderName(holder), uid)
	case s.ops.releasing[uid]:
		return nil, false, fmt.Errorf("%w: %s is being unprepared; device %s is not programmed for it any more", ErrReleasing, s.holderName(uid), device)
	}
	switch j := s.regions.jobs[device]; {
	case j != nil && j.holder == uid && j.afu == afuID:
		return j, false, nil
	case j != nil: // one job per region
		return nil, false, j.busy(fmt.Sprintf("program AFU %s once that has ended", afuID))
	}
	card, port, ok := devs.FindPort(device)
	if !ok {
		return nil, false, fmt.Errorf("device %s is not on this node (any more): it was unplugged or its card failed discovery", device)
	}
	cfg := &v1alpha1.FpgaConfig{AFUID: afuID, InterfaceID: interfaceID, Programming: v1alpha1.ProgrammingIfNeeded}
	p, err := decideDevice(cfg, s.facts(uid, device, card, port, nil, func(types.UID) bool { return false }))
	switch {
	case err != nil:
		return nil, false, err
	case !p.Program && rec.Devices[idx].AFUID == afuID:
		return nil, false, nil // loaded and recorded
	}
	h := Holder{UID: uid, Namespace: rec.Namespace, Name: rec.Name}
	j = s.newJob(context.WithoutCancel(s.ctx), h, &plan{req: DeviceRequest{Device: device, Requests: rec.Devices[idx].Requests, Config: cfg}, card: card, port: port, devicePlan: p})
	// Success only once the record is on the disk.
	j.then = func(j *job) {
		if j.result.Err != nil {
			return
		}
		if err := s.recordAFU(uid, device, afuID, j.program, devs); err != nil {
			j.result.Err = fmt.Errorf("device %s was programmed with AFU %s, but recording it failed: %w", device, afuID, err)
		}
	}
	return j, true, nil
}

// recordAFU notes in a hold's record that device now carries afuID and
// rewrites the hold's CDI spec to match.
func (s *State) recordAFU(uid types.UID, device, afuID string, programmed bool, devs *discovery.Result) error {
	s.mu.Lock()
	rec := s.book.cp.Claims[string(uid)]
	i := -1
	if rec != nil && s.holds[device] == uid {
		i = slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == device })
	}
	if i < 0 || (rec.Devices[i].AFUID == afuID && !programmed) {
		s.mu.Unlock()
		return nil // released meanwhile, or nothing changed
	}
	h := Holder{UID: uid, Namespace: rec.Namespace, Name: rec.Name}
	updated := rec.Clone()
	updated.Devices[i].AFUID = afuID
	updated.Devices[i].Programmed = updated.Devices[i].Programmed || programmed
	s.mu.Unlock()
	if _, err := s.writeSpec(h, updated.Devices, devs); err != nil {
		return fmt.Errorf("rewrite the CDI spec after programming: %w", err)
	}
	return s.commit(func(cp *checkpoint.Checkpoint) {
		if cur := cp.Claims[string(uid)]; cur != nil && s.holds[device] == uid && len(cur.Devices) > i && cur.Devices[i].Device == device {
			cur.Devices[i].AFUID = afuID
			cur.Devices[i].Programmed = cur.Devices[i].Programmed || programmed
		}
	})
}
