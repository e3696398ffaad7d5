package state

import (
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// gone sorts what of granted (nodes a container may have been given) recs'
// ports do not have in devs: stale are nodes whose path or number another
// port has now (a container reaches that port, or through it, by them);
// vanished are nodes no port has (a scan that missed one, or a number that
// may come back on another port: checkVanished). ok is false when a port
// of recs is missing from devs (its card left out of the pass), which
// tells nothing.
func gone(granted []string, recs []DeviceRecord, devs *discovery.Result) (stale, vanished []string, ok bool) {
	have, own := map[string]bool{}, map[string]bool{}
	for _, d := range recs {
		_, p, found := devs.FindPort(d.Device)
		if !found {
			return nil, nil, false
		}
		for _, n := range nodeList(portNodes(p)) {
			have[n] = true
			// A container reaches a device by its number: one of the
			// holder's own ports' numbers reaches nothing of another.
			own[nodeNumber(n)] = true
		}
	}
	paths, numbers := map[string]bool{}, map[string]bool{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			for _, n := range nodeList(portNodes(p)) {
				path, number := splitNode(n)
				paths[path], numbers[number] = true, true
			}
		}
	}
	for _, n := range granted {
		path, number := splitNode(n)
		if have[n] || own[number] || slices.Contains(stale, n) || slices.Contains(vanished, n) {
			continue
		}
		if paths[path] || numbers[number] {
			stale = append(stale, n)
		} else {
			vanished = append(vanished, n)
		}
	}
	return stale, vanished, true
}

// noteGone records what of granted h's devices no longer have in devs
// (gone): stale nodes in its record (noteRenumbered), vanished ones for
// checkVanished. It must run before a spec without them replaces the one
// that gave them.
func (s *State) noteGone(logger klog.Logger, h Holder, granted []string, recs []DeviceRecord, devs *discovery.Result) error {
	stale, vanished, ok := gone(granted, recs, devs)
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
// whose path or number another port has now is stale (noteRenumbered), one
// still nowhere is kept. The list lives in memory: a restart forgets it.
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
		stale, vanished, ok := gone(nodes, rec.Devices, devs)
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
	if added {
		// In memory even if the flush failed: announce it.
		s.step(StepRenumbered, h.UID)
		if s.cfg.OnRenumbered != nil {
			s.cfg.OnRenumbered()
		}
		s.notify()
	}
	return err
}

// nodeNumber is the device number ("major:minor") of a node described by
// cdi.NodeString.
func nodeNumber(node string) string {
	_, number := splitNode(node)
	return number
}

// splitNode splits a node described by cdi.NodeString into its path and
// its device number ("major:minor").
func splitNode(node string) (path, number string) {
	i := strings.LastIndexByte(node, ' ')
	return node[:max(i, 0)], node[i+1:]
}

// RenumberedDevices returns the devices of devs a ResourceSlice must
// taint because a running container may reach them, or through them, by
// a device number it was given before the node's cards were enumerated
// anew: the devices of every holder with Renumbered nodes (to evict its
// containers), and every device one of whose nodes has one of those
// numbers now, whatever its path (to keep it from other claims meanwhile).
// Each maps to such a holder.
func (s *State) RenumberedDevices(devs *discovery.Result) map[string]Holder {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Holder{}
	byNumber := map[string]Holder{}
	for _, rec := range s.book.cp.Claims {
		if len(rec.Renumbered) == 0 || rec.BootID != s.bootID {
			// A reboot since ended the containers given them.
			continue
		}
		h := Holder{UID: types.UID(rec.UID), Namespace: rec.Namespace, Name: rec.Name}
		for _, d := range rec.Devices {
			out[d.Device] = h
		}
		for _, n := range rec.Renumbered {
			byNumber[nodeNumber(n)] = h
		}
	}
	if len(byNumber) == 0 {
		return out
	}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			for _, n := range nodeList(portNodes(p)) {
				if h, ok := byNumber[nodeNumber(n)]; ok {
					out[p.DeviceName()] = h
				}
			}
		}
	}
	return out
}
