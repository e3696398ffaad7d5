package state

import (
	"errors"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// portNodes describes a port's device nodes: cdi.NodeString of each,
// followed by ';'.
func portNodes(p *discovery.Port) string {
	var b strings.Builder
	for _, n := range p.Nodes() {
		b.WriteString(cdi.NodeString(n.Path, int64(n.Major), int64(n.Minor)))
		b.WriteByte(';')
	}
	return b.String()
}

// nodeList splits what nodesOf or portNodes describe into its nodes.
func nodeList(sig string) []string {
	return strings.FieldsFunc(sig, func(r rune) bool { return r == ';' || r == '|' })
}

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
			if !slices.Contains(s.vanished[h.UID], n) {
				s.vanished[h.UID] = append(s.vanished[h.UID], n)
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
	for uid, nodes := range s.vanished {
		rec := s.cp.Claims[string(uid)]
		if rec == nil || rec.Phase != PhaseCompleted {
			delete(s.vanished, uid)
			continue
		}
		stale, vanished, ok := gone(nodes, rec.Devices, devs)
		if !ok {
			continue
		}
		if len(vanished) == 0 {
			delete(s.vanished, uid)
		} else {
			s.vanished[uid] = vanished
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
	err := s.commit(nil, func(cp *Checkpoint) {
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
	for _, rec := range s.cp.Claims {
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

// nodesIn is portNodes of every port of devs, by device name.
func nodesIn(devs *discovery.Result) map[string]string {
	m := map[string]string{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			m[p.DeviceName()] = portNodes(p)
		}
	}
	return m
}

// nodesOf describes the device nodes recs' ports have (nodes: nodesIn of
// a result); ok is false when one of them is not there (its card left
// out of the pass).
func nodesOf(nodes map[string]string, recs []DeviceRecord) (string, bool) {
	var b strings.Builder
	for _, d := range recs {
		n, ok := nodes[d.Device]
		if !ok {
			return "", false
		}
		b.WriteString(n)
		b.WriteByte('|')
	}
	return b.String(), true
}

// noteWritten records that uid's CDI spec was written from devs.
func (s *State) noteWritten(uid types.UID, recs []DeviceRecord, devs *discovery.Result) {
	nodes := map[string]string{}
	for _, d := range recs {
		if _, p, ok := devs.FindPort(d.Device); ok {
			nodes[d.Device] = portNodes(p)
		}
	}
	sig, ok := nodesOf(nodes, recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.written[uid] = sig
	} else {
		delete(s.written, uid)
	}
	if s.specDevs == nil || devs.Started.After(s.specDevs.Started) {
		s.specDevs, s.specNodes = devs, nodesIn(devs)
	}
}

type refreshWork struct {
	op  *op
	rec *ClaimRecord
}

// staleSpec starts, for a completed holder whose spec was not written from
// specDevs' nodes and that nothing else is busy with, an operation that
// rewrites it. Caller holds mu.
func (s *State) staleSpec(u types.UID) *refreshWork {
	rec := s.cp.Claims[string(u)]
	if s.ctx.Err() != nil || s.draining || s.specDevs == nil || rec == nil || rec.Phase != PhaseCompleted || s.ops[u] != nil || s.releasing[u] || s.hasJobs(u) || !s.holdsRecord(u, rec) {
		return nil
	}
	sig, ok := nodesOf(s.specNodes, rec.Devices)
	if w, known := s.written[u]; !ok || (known && w == sig) {
		return nil
	}
	// An operation of its own, as an answered prepare's (a release waits
	// for it, no prepare supersedes the holder meanwhile), but no change
	// of the holder's Version: the hold stays as it was.
	o := &op{holder: Holder{UID: u, Namespace: rec.Namespace, Name: rec.Name}, cancel: func(error) {}, done: make(chan struct{}), refresh: true}
	s.ops[u] = o
	return &refreshWork{op: o, rec: rec.clone()}
}

// recheckSpec rewrites, in the background, uid's spec when an operation or
// job that kept RefreshSpecs from it ended. Caller holds mu.
func (s *State) recheckSpec(u types.UID) {
	if w := s.staleSpec(u); w != nil {
		devs := s.specDevs
		go func() {
			if err := s.rewrite([]*refreshWork{w}, devs); err != nil {
				klog.FromContext(s.ctx).Error(err, "Rewriting a CDI spec from the devices' nodes as they are now failed; the next change of the devices tries again")
			}
		}()
	}
}

func (s *State) rewrite(todo []*refreshWork, devs *discovery.Result) error {
	var errs []error
	for _, w := range todo {
		out, err := s.completed(w.op.holder, w.rec, nil, devs)
		s.finish(w.op, out, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RefreshSpecs rewrites the CDI spec of every completed holder whose spec
// was not written from the device nodes its ports have in devs (the cards
// were enumerated anew, or its card was missing when the spec was
// written): the runtime reads a claim's spec at every container
// (re)start, and the kubelet prepares a prepared claim no more. A holder
// busy with an operation or a programming job is rewritten when that
// ends. A result older than one seen before is ignored.
func (s *State) RefreshSpecs(devs *discovery.Result) error {
	now := nodesIn(devs)
	s.mu.Lock()
	if s.specDevs != nil && devs.Started.Before(s.specDevs.Started) {
		s.mu.Unlock()
		return nil
	}
	s.specDevs, s.specNodes = devs, now
	var todo []*refreshWork
	for uid := range s.cp.Claims {
		if w := s.staleSpec(types.UID(uid)); w != nil {
			todo = append(todo, w)
		}
	}
	s.mu.Unlock()
	return errors.Join(s.rewrite(todo, devs), s.checkVanished(klog.FromContext(s.ctx), devs))
}
