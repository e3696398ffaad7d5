package state

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
)

// Unprepare releases a holder's devices and removes its CDI spec; an
// unknown holder is not an error. A prepare or programming job of the
// holder is cancelled and the devices stay held until it ended: Unprepare
// waits for that at most ReleaseWait, then fails with ErrReleasing.
func (s *State) Unprepare(ctx context.Context, uid types.UID, opts ...UnprepareOption) error {
	var o unprepareOptions
	for _, f := range opts {
		f(&o)
	}
	for {
		rel, pending, known, err := s.beginRelease(uid, o)
		o.ifUnchanged = nil // the cancelled operations change it
		switch {
		case err != nil:
			return err
		case !known:
			if err := s.durable(); err != nil {
				return fmt.Errorf("release claim %s: %w", uid, err)
			}
			return s.removeOrphanSpec(uid)
		case rel != nil:
			return s.awaitRelease(ctx, rel)
		}
		if err := s.awaitEnded(ctx, uid, pending); err != nil {
			return err
		}
	}
}

// UnprepareOption adjusts one Unprepare.
type UnprepareOption func(*unprepareOptions)

type unprepareOptions struct {
	ifUnchanged *Version
}

// IfUnchanged releases the holder only while its Version is v, else fails
// with ErrChanged.
func IfUnchanged(v Version) UnprepareOption {
	return func(o *unprepareOptions) { o.ifUnchanged = &v }
}

// beginRelease is Unprepare's critical section: it marks uid as being
// released and returns the release operation to wait for, or the
// channels of the operations of uid it cancelled.
func (s *State) beginRelease(uid types.UID, o unprepareOptions) (rel *op, pending []<-chan struct{}, known bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.drainingError("unprepare of", s.holderName(uid)); err != nil {
		return nil, nil, false, err
	}
	cur := s.ops.active[uid]
	if cur != nil && cur.release {
		return cur, nil, true, nil
	}
	if o.ifUnchanged != nil && s.ops.versions[uid] != *o.ifUnchanged {
		return nil, nil, true, fmt.Errorf("%w: claim %s was prepared again since the release was decided; it stays held", ErrChanged, s.holderName(uid))
	}
	_, recorded := s.book.cp.Claims[string(uid)]
	if !recorded && cur == nil && s.jobOf(uid) == nil {
		delete(s.ops.releasing, uid)
		delete(s.ops.versions, uid)
		return nil, nil, false, nil
	}
	s.ops.releasing[uid] = true
	if cur != nil {
		select {
		case <-cur.done:
		default:
			cur.cancel(fmt.Errorf("%w: claim unprepared", ErrReleasing))
			pending = append(pending, cur.done)
		}
	}
	for _, j := range s.regions.jobs {
		if j.holder == uid {
			j.cancel(fmt.Errorf("%w: claim unprepared", ErrReleasing))
			pending = append(pending, j.done)
		}
	}
	if len(pending) > 0 {
		return nil, pending, true, nil
	}
	h := Holder{UID: uid}
	if rec := s.book.cp.Claims[string(uid)]; rec != nil {
		h.Namespace, h.Name = rec.Namespace, rec.Name
	}
	rel = &op{holder: h, release: true, done: make(chan struct{})}
	s.ops.active[uid] = rel
	go s.runRelease(rel)
	return rel, nil, true, nil
}

// removeOrphanSpec removes the CDI spec of uid, a holder the state does
// not know (one Restore kept), unless uid is known again.
func (s *State) removeOrphanSpec(uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, recorded := s.book.cp.Claims[string(uid)]; recorded || s.ops.active[uid] != nil || s.jobOf(uid) != nil {
		return nil
	}
	if err := s.cfg.CDI.RemoveClaimSpec(string(uid)); err != nil {
		return fmt.Errorf("release claim %s: %w", uid, err)
	}
	return nil
}

// awaitEnded waits for pending, at most ReleaseWait.
func (s *State) awaitEnded(ctx context.Context, uid types.UID, pending []<-chan struct{}) error {
	timer := time.NewTimer(s.cfg.ReleaseWait)
	defer timer.Stop()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-timer.C:
			return s.stillReleasing(uid, "")
		case <-ctx.Done():
			return s.stillReleasing(uid, fmt.Sprintf(" (the call was cancelled: %v)", context.Cause(ctx)))
		}
	}
	return nil
}

// stillReleasing describes a release waiting for programming.
func (s *State) stillReleasing(uid types.UID, why string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range s.regions.jobs {
		if j.holder == uid {
			return fmt.Errorf("%w: claim %s: programming of device %s (started %s ago) is still running%s; its devices are freed when it ends; the kubelet retries",
				ErrReleasing, s.holderName(uid), j.device, time.Since(j.started).Round(time.Second), why)
		}
	}
	return fmt.Errorf("%w: claim %s is still being prepared%s; its devices are freed when that ends; the kubelet retries", ErrReleasing, s.holderName(uid), why)
}

// awaitRelease waits for a release operation while ctx lasts.
func (s *State) awaitRelease(ctx context.Context, rel *op) error {
	select {
	case <-rel.done:
		return rel.err
	case <-ctx.Done():
		return fmt.Errorf("%w: claim %s is being released; the call was cancelled: %v", ErrReleasing, rel.holder, context.Cause(ctx))
	}
}

// runRelease removes a holder's CDI spec, then its record and holds in one
// commit.
func (s *State) runRelease(rel *op) {
	uid := rel.holder.UID
	err := s.cfg.CDI.RemoveClaimSpec(string(uid))
	if err != nil {
		err = fmt.Errorf("remove CDI spec of claim %s: %w", rel.holder, err)
	} else {
		s.step(StepSpecRemoved, uid)
		err = s.commit(func(*checkpoint.Checkpoint) {
			s.dropRecord(uid)
			for device, h := range s.holds {
				if h == uid {
					delete(s.holds, device)
				}
			}
		})
		if err == nil {
			if s.cfg.Registry != nil {
				s.cfg.Registry.Release(string(uid)) // its cached bitstreams may go
			}
			s.step(StepReleased, uid)
			klog.FromContext(s.ctx).V(3).Info("Unprepared claim", "claim", klog.KRef(rel.holder.Namespace, rel.holder.Name), "uid", uid)
		}
	}
	s.mu.Lock()
	delete(s.ops.releasing, uid)
	delete(s.ops.active, uid)
	if err == nil {
		delete(s.specs.written, uid)
	}
	s.forgetVersion(uid)
	rel.err = err
	close(rel.done)
	s.mu.Unlock()
	if err == nil {
		s.notify()
	}
}
