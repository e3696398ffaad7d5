package state

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/renumber"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// answer runs an operation that answers a prepare from the holder's
// record rec, completed (or programmed, for a prepare before binding),
// once every change is on the disk.
func (s *State) answer(ctx context.Context, op *op, rec *ClaimRecord, reqs []DeviceRequest, devs *discovery.Result) (Outcome, error) {
	h := op.holder
	var out Outcome
	err := s.durable()
	switch {
	case err != nil:
		err = fmt.Errorf("record claim %s: %w", h, err)
	case rec.Phase == PhaseProgrammed:
		// Programmed before binding already.
	default: // after the hook's programming, at most PrepareWait
		if err = s.awaitHolderJobs(ctx, h.UID); err == nil {
			out, err = s.completed(h, rec, reqs, devs)
		}
	}
	s.finish(op, out, err)
	return op.out, op.err
}

// completed answers a prepare of a completed holder, rewriting its CDI
// spec from its devices' nodes as discovery shows them now. A device
// recorded without request names is answered with reqs'. It holds the
// devices' port locks, so no programming job passes its write.
func (s *State) completed(h Holder, rec *ClaimRecord, reqs []DeviceRequest, devs *discovery.Result) (Outcome, error) {
	if s.hooks.onCompleted != nil {
		s.hooks.onCompleted(h.UID)
	}
	unlock := s.lockPorts(rec.Devices)
	defer unlock()
	rec = rec.Clone()
	s.mu.Lock()
	if cur := s.book.cp.Claims[string(h.UID)]; cur != nil {
		for i, d := range rec.Devices {
			if j := slices.IndexFunc(cur.Devices, func(c DeviceRecord) bool { return c.Device == d.Device }); j >= 0 {
				rec.Devices[i].AFUID = cur.Devices[j].AFUID
			}
		}
	}
	written, known := s.specs.written[h.UID]
	s.mu.Unlock()
	granted := renumber.List(written)
	if !known { // not written by this process
		granted, known = s.grantedOnDisk(rec)
	}
	if known {
		if err := s.noteGone(klog.FromContext(s.ctx), h, granted, rec.Devices, devs); err != nil {
			return Outcome{}, fmt.Errorf("record the renumbered devices of claim %s: %w", h, err)
		}
	}
	if _, err := s.writeSpec(h, rec.Devices, devs); err != nil {
		return Outcome{}, fmt.Errorf("rewrite CDI spec of claim %s: %w", h, err)
	}
	var out Outcome
	for i, d := range rec.Devices {
		if len(d.Requests) == 0 && i < len(reqs) && reqs[i].Device == d.Device {
			d.Requests = reqs[i].Requests
		}
		out.Devices = append(out.Devices, PreparedDevice{Device: d.Device, Requests: d.Requests, CDIDeviceIDs: []string{d.CDIDeviceID}, AFUID: d.AFUID})
	}
	return out, nil
}
