package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// RefreshSpecs rewrites the CDI spec of every completed holder one of whose
// ports has other device nodes in devs than in the result of the previous
// call (the cards were enumerated anew): the runtime reads a claim's spec
// at every container (re)start, and the kubelet prepares a prepared claim
// no more, so a spec written before the renumbering would hand a
// restarted container another card's port. Each rewrite runs as an
// operation of its own, as an answered prepare does: a release waits for
// it, and no prepare supersedes the holder meanwhile. The first call only
// notes the nodes (Restore wrote every spec from its own result).
func (s *State) RefreshSpecs(devs *discovery.Result) error {
	now := map[string]string{}
	for _, c := range devs.Cards {
		for _, p := range c.Ports {
			var b strings.Builder
			for _, n := range p.Nodes() {
				fmt.Fprintf(&b, "%s %d:%d;", n.Path, n.Major, n.Minor)
			}
			now[p.DeviceName()] = b.String()
		}
	}
	type work struct {
		op  *op
		rec *ClaimRecord
	}
	var todo []work
	s.mu.Lock()
	prev := s.specNodes
	s.specNodes = now
	if prev != nil {
		for uid, rec := range s.cp.Claims {
			u := types.UID(uid)
			if rec.Phase != PhaseCompleted || s.ops[u] != nil || s.releasing[u] || !s.holdsRecord(u, rec) {
				continue
			}
			if !slices.ContainsFunc(rec.Devices, func(d DeviceRecord) bool {
				old, ok1 := prev[d.Device]
				cur, ok2 := now[d.Device]
				return ok1 && ok2 && old != cur
			}) {
				continue
			}
			h := Holder{UID: u, Namespace: rec.Namespace, Name: rec.Name}
			todo = append(todo, work{op: s.newOp(h, func(error) {}, prepareOptions{}), rec: rec.clone()})
		}
	}
	s.mu.Unlock()
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
