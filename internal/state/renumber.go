package state

import (
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/internal/renumber"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// noteGone records what of granted h's devices no longer have in devs
// (renumber.Gone): stale nodes in its record (noteRenumbered), vanished ones for
// checkVanished. It must run before a spec without them replaces the one
// that gave them.
func (s *State) noteGone(logger klog.Logger, h Holder, granted []string, recs []DeviceRecord, devs *discovery.Result) error {
	stale, vanished, ok := renumber.Gone(granted, deviceNames(recs), devs)
	if !ok {
		return nil
	}
	if len(vanished) > 0 {
		s.mu.Lock()
		for _, n := range vanished {
			if !slices.Contains(s.specs.vanished[h.UID], n) {
				s.specs.vanished[h.UID] = append(s.specs.vanished[h.UID], n)
			}
		}
		s.mu.Unlock()
	}
	return s.noteRenumbered(logger, h, stale)
}

// checkVanished looks again for the vanished nodes of completed holders
// (noteGone) in devs: one back on the holder's port is forgotten, one
// another port has now is stale (noteRenumbered), one still nowhere kept.
func (s *State) checkVanished(logger klog.Logger, devs *discovery.Result) error {
	type found struct {
		h     Holder
		stale []string
	}
	var todo []found
	s.mu.Lock()
	for uid, nodes := range s.specs.vanished {
		rec := s.book.cp.Claims[string(uid)]
		if rec == nil || rec.Phase != PhaseCompleted {
			delete(s.specs.vanished, uid)
			continue
		}
		stale, vanished, ok := renumber.Gone(nodes, deviceNames(rec.Devices), devs)
		if !ok {
			continue
		}
		if len(vanished) == 0 {
			delete(s.specs.vanished, uid)
		} else {
			s.specs.vanished[uid] = vanished
		}
		if len(stale) > 0 {
			todo = append(todo, found{Holder{UID: uid, Namespace: rec.Namespace, Name: rec.Name}, stale})
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, f := range todo {
		errs = append(errs, s.noteRenumbered(logger, f.h, f.stale))
	}
	return errors.Join(errs...)
}

// noteRenumbered adds nodes to the Renumbered of uid's record, on the
// disk, before a spec without them replaces the one that gave them.
func (s *State) noteRenumbered(logger klog.Logger, h Holder, nodes []string) error {
	if len(nodes) == 0 {
		return nil
	}
	logger.Error(nil, "DEVICE NUMBERS CHANGED under a prepared claim: its running containers may reach other ports by the numbers they were given; its devices are tainted NoExecute until it is unprepared", "claim", klog.KRef(h.Namespace, h.Name), "uid", h.UID, "nodes", nodes)
	added := false
	err := s.commit(func(cp *checkpoint.Checkpoint) {
		if rec := cp.Claims[string(h.UID)]; rec != nil {
			for _, n := range nodes {
				if !slices.Contains(rec.Renumbered, n) {
					rec.Renumbered = append(rec.Renumbered, n)
					added = true
				}
			}
		}
	})
	if added { // in memory even if the flush failed
		s.step(StepRenumbered, h.UID)
		if s.cfg.OnRenumbered != nil {
			s.cfg.OnRenumbered()
		}
		s.notify()
	}
	return err
}

// RenumberedDevices returns the devices a ResourceSlice must taint, each
// with the holder whose containers may reach it by a device number given
// before the cards were enumerated anew: the devices of every holder with
// Renumbered nodes, and every device of devs with one of those numbers.
func (s *State) RenumberedDevices(devs *discovery.Result) map[string]Holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Holder{}
	byNumber := map[string]Holder{}
	for _, rec := range s.book.cp.Claims {
		if len(rec.Renumbered) == 0 || rec.BootID != s.bootID { // a reboot ended them
			continue
		}
		h := Holder{UID: types.UID(rec.UID), Namespace: rec.Namespace, Name: rec.Name}
		for _, d := range rec.Devices {
			out[d.Device] = h
		}
		for _, n := range rec.Renumbered {
			byNumber[renumber.Number(n)] = h
		}
	}
	if len(byNumber) == 0 {
		return out
	}
	for device, number := range renumber.Using(devs, func(n string) bool { _, ok := byNumber[n]; return ok }) {
		out[device] = byNumber[number]
	}
	return out
}
