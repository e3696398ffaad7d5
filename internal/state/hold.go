package state

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// ErrNotHeld: a device is not prepared for the holder that asked.
var ErrNotHeld = errors.New("device not prepared for this holder")

// ProgramHeld loads the accelerator function afuID into the region behind
// device for the holder uid that holds it: the legacy device-plugin
// endpoint's programming hook asks for it just before the holder's
// container starts. It fails with ErrNotHeld unless uid holds device,
// with program.ErrInterfaceMismatch unless interfaceID is the region's
// interface ID, and with ErrNotProgrammable on a node that forbids
// programming. The bitstream is looked up in the node's repository from
// the two IDs, exactly as for a claim's FpgaConfig without a bitstream
// name; no path is taken from the caller. Nothing is loaded when afuID is
// loaded already (programming: IfNeeded).
//
// ProgramHeld waits for the programming until ctx ends (ErrInProgress; the
// programming goes on and a repeated call waits for the same job). It is
// serialised with every other programming of the port. Afterwards the
// hold's record, and its CDI spec, carry afuID.
func (s *State) ProgramHeld(ctx context.Context, uid types.UID, device, interfaceID, afuID string, devs *discovery.Result) (Programming, error) {
	res := Programming{Device: device, AFUID: afuID}
	s.mu.Lock()
	holder, held := s.holders[device]
	rec := s.cp.Claims[string(uid)]
	idx := -1
	if rec != nil {
		idx = slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == device })
	}
	switch {
	case !held:
		s.mu.Unlock()
		return res, fmt.Errorf("%w: device %s is not prepared for anyone; only a device allocated to %s can be programmed for it", ErrNotHeld, device, uid)
	case holder != uid || idx < 0:
		s.mu.Unlock()
		return res, fmt.Errorf("%w: device %s is prepared for %s, not for %s", ErrNotHeld, device, holder, uid)
	}
	card, port, ok := devs.FindPort(device)
	if !ok {
		s.mu.Unlock()
		return res, fmt.Errorf("device %s is not on this node (any more): it was unplugged or its card failed discovery", device)
	}
	if interfaceID != card.InterfaceID {
		s.mu.Unlock()
		return res, fmt.Errorf("%w: device %s has interface ID %s, not the requested %s: request the region resource of interface %s or build the AFU for %s",
			program.ErrInterfaceMismatch, device, card.InterfaceID, interfaceID, interfaceID, card.InterfaceID)
	}
	j := s.jobs[device]
	if j == nil || j.holder != uid || j.afu != afuID {
		j = nil
		if port.AFUID != afuID {
			if !s.cfg.Programmable {
				s.mu.Unlock()
				return res, fmt.Errorf("%w: device %s carries AFU %s and %s is requested, but this node runs with --programmable=false", ErrNotProgrammable, device, orNone(port.AFUID), afuID)
			}
			if s.cfg.Programmer == nil {
				s.mu.Unlock()
				return res, fmt.Errorf("%w: device %s needs AFU %s but no programmer is configured on this node", ErrNotProgrammable, device, afuID)
			}
			h := Holder{UID: uid, Namespace: rec.Namespace, Name: rec.Name}
			cfg := &v1alpha1.FpgaConfig{AFUID: afuID, InterfaceID: interfaceID, Programming: v1alpha1.ProgrammingIfNeeded}
			j = s.startJob(ctx, h, &plan{
				req:  DeviceRequest{Device: device, Requests: rec.Devices[idx].Requests, Config: cfg},
				card: card, port: port, program: true, afu: afuID,
			})
		}
	}
	s.mu.Unlock()

	if j != nil {
		select {
		case <-j.done:
		case <-ctx.Done():
			return res, fmt.Errorf("%w: device %s is being programmed with AFU %s; the call was cancelled: %v", ErrInProgress, device, afuID, ctx.Err())
		}
		res = j.result
		s.mu.Lock()
		if s.jobs[device] == j {
			delete(s.jobs, device)
		}
		s.mu.Unlock()
		if res.Err != nil {
			return res, res.Err
		}
	}
	s.recordAFU(ctx, uid, device, afuID, j != nil, devs)
	return res, nil
}

// recordAFU notes in a hold's record that device now carries afuID and
// rewrites the hold's CDI spec to match. Failures are logged: the region
// is programmed either way, and Restore rewrites specs from the record.
func (s *State) recordAFU(ctx context.Context, uid types.UID, device, afuID string, programmed bool, devs *discovery.Result) {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	rec := s.cp.Claims[string(uid)]
	if rec == nil || s.holders[device] != uid {
		s.mu.Unlock()
		return // released meanwhile
	}
	i := slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == device })
	if i < 0 || (rec.Devices[i].AFUID == afuID && !programmed) {
		s.mu.Unlock()
		return
	}
	rec.Devices[i].AFUID = afuID
	rec.Devices[i].Programmed = rec.Devices[i].Programmed || programmed
	recs := slices.Clone(rec.Devices)
	s.changed()
	s.mu.Unlock()
	if err := s.persist(); err != nil {
		logger.Error(err, "Recording the programmed AFU failed", "holder", uid, "device", device)
	}
	if _, err := s.writeSpec(uid, recs, devs); err != nil {
		logger.Error(err, "Rewriting the CDI spec after programming failed", "holder", uid, "device", device)
	}
}
