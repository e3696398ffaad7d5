package state

import (
	"errors"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/renumber"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

type refreshWork struct {
	op  *op
	rec *ClaimRecord
}

// staleSpec starts, for a completed holder whose spec was not written from
// specDevs' nodes and that nothing else is busy with, an operation that
// rewrites it. Caller holds mu.
func (s *State) staleSpec(u types.UID) *refreshWork {
	rec := s.book.cp.Claims[string(u)]
	if s.ctx.Err() != nil || s.draining || s.specs.devs == nil || rec == nil || rec.Phase != PhaseCompleted || s.ops.active[u] != nil || s.ops.releasing[u] || s.jobOf(u) != nil || !s.holdsRecord(u, rec) {
		return nil
	}
	sig, ok := renumber.Of(s.specs.nodes, deviceNames(rec.Devices))
	if w, known := s.specs.written[u]; !ok || (known && w == sig) {
		return nil
	}
	// An operation of its own, as an answered prepare's, that changes no
	// Version.
	o := &op{holder: Holder{UID: u, Namespace: rec.Namespace, Name: rec.Name}, cancel: func(error) {}, done: make(chan struct{}), refresh: true}
	s.ops.active[u] = o
	return &refreshWork{op: o, rec: rec.Clone()}
}

// recheckSpec rewrites, in the background, uid's spec when an operation or
// job that kept RefreshSpecs from it ended. Caller holds mu.
func (s *State) recheckSpec(u types.UID) {
	if w := s.staleSpec(u); w != nil {
		devs := s.specs.devs
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
// was not written from the device nodes its ports have in devs; a busy
// holder's is rewritten when its operation or job ends. A result older
// than one seen before is ignored.
func (s *State) RefreshSpecs(devs *discovery.Result) error {
	now := renumber.ByDevice(devs)
	s.mu.Lock()
	if s.specs.devs != nil && devs.Started.Before(s.specs.devs.Started) {
		s.mu.Unlock()
		return nil
	}
	s.specs.devs, s.specs.nodes = devs, now
	var todo []*refreshWork
	for uid := range s.book.cp.Claims {
		if w := s.staleSpec(types.UID(uid)); w != nil {
			todo = append(todo, w)
		}
	}
	s.mu.Unlock()
	return errors.Join(s.rewrite(todo, devs), s.checkVanished(klog.FromContext(s.ctx), devs))
}
