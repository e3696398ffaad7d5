package state

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// PrepareOption adjusts one Prepare.
type PrepareOption func(*prepareOptions)

type prepareOptions struct {
	supersede     func(types.UID) bool
	rebuild       bool
	beforeBinding bool
}

// BeforeBinding makes the prepare program what its devices need and
// record the holder as PhaseProgrammed, without a CDI spec (a claim with
// binding conditions, before its pod is bound). Outcome.Devices is empty.
func BeforeBinding() PrepareOption {
	return func(o *prepareOptions) { o.beforeBinding = true }
}

// Supersede lets the prepare take devices from other holders for which
// may returns true, releasing them in the same commit; a holder with an
// operation or programming in flight is never superseded.
func Supersede(may func(types.UID) bool) PrepareOption {
	return func(o *prepareOptions) { o.supersede = may }
}

// Rebuild makes a prepare of a completed holder decide again and rewrite
// its record and CDI spec.
func Rebuild() PrepareOption {
	return func(o *prepareOptions) { o.rebuild = true }
}

// Prepare prepares a holder's devices. It is idempotent (a completed
// holder gets the same CDI devices again) and racing calls for one holder
// get one answer. A device another holder holds is refused with
// ErrDeviceHeld. When programming outlasts PrepareWait, Prepare returns an
// error wrapping ErrInProgress and programming goes on; a later call
// returns its result.
func (s *State) Prepare(ctx context.Context, h Holder, reqs []DeviceRequest, devs *discovery.Result, opts ...PrepareOption) (Outcome, error) {
	o := prepareOptions{supersede: func(types.UID) bool { return false }}
	for _, f := range opts {
		f(&o)
	}
	var before []Programming
	waited := false
	for {
		op, completed, plans, superseded, err := s.decidePrepare(h, reqs, devs, o)
		var hook *hookJobError
		switch {
		case errors.As(err, &hook) && !waited:
			if werr := s.awaitHolderJobs(ctx, h.UID); werr != nil {
				return Outcome{Programmed: before}, werr
			}
			waited = true
			continue
		case err != nil:
			return Outcome{Programmed: before}, err
		case completed != nil:
			out, err := s.answer(ctx, op, completed, reqs, devs)
			out.Programmed = before
			return out, err
		case plans != nil && len(op.jobs) == 0:
			s.runPrepare(klog.FromContext(ctx), op, plans, superseded, devs)
		case plans != nil:
			go s.runPrepare(klog.FromContext(ctx), op, plans, superseded, devs)
		}
		out, err := s.await(ctx, op)
		out.Programmed = append(before, out.Programmed...)
		if err != nil || !op.beforeBinding || o.beforeBinding {
			return out, err
		}
		// Joined a prepare before binding, which hands out no devices:
		// now prepare on its record.
		before = out.Programmed
	}
}

// decidePrepare is Prepare's critical section: it joins the holder's
// operation, starts one that answers from its completed record, or
// reserves every device for the holder in a new operation with plans.
func (s *State) decidePrepare(h Holder, reqs []DeviceRequest, devs *discovery.Result, o prepareOptions) (*op, *ClaimRecord, []*plan, []types.UID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.drainingError("prepare of", h); err != nil {
		return nil, nil, nil, nil, err
	}
	if s.ops.releasing[h.UID] {
		return nil, nil, nil, nil, fmt.Errorf("%w: claim %s is being unprepared; prepare it again once that has finished", ErrReleasing, h)
	}
	if op := s.ops.active[h.UID]; op != nil {
		return op, nil, nil, nil, nil // join it
	}
	rec := s.book.cp.Claims[string(h.UID)]
	rebooted := rec != nil && rec.BootID != s.bootID
	switch {
	case rec == nil || rebooted || o.rebuild || !sameDevices(rec, reqs):
	case !s.holdsRecord(h.UID, rec): // being superseded: deciding anew refuses
	case rec.Phase == PhaseCompleted, rec.Phase == PhaseProgrammed && o.beforeBinding:
		return s.newOp(h, func(error) {}, o), rec.Clone(), nil, nil, nil
	}
	plans, superseded, err := s.planDevices(h, reqs, devs, rec, o)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// Jobs outlive s.ctx (WaitIdle waits for them): no region is left
	// half programmed.
	jobCtx, cancel := context.WithCancelCause(context.WithoutCancel(s.ctx))
	op := s.newOp(h, cancel, o)
	for _, p := range plans {
		s.holds[p.req.Device] = h.UID
		if p.Program {
			p.job = s.newJob(jobCtx, h, p)
			op.jobs = append(op.jobs, p.job)
		}
	}
	s.step(StepReserved, h.UID)
	return op, nil, plans, superseded, nil
}

// planDevices decides, for a prepare of h that starts an operation, what
// each device needs (decideDevice), and which holders it supersedes.
// Caller holds mu.
func (s *State) planDevices(h Holder, reqs []DeviceRequest, devs *discovery.Result, rec *ClaimRecord, o prepareOptions) ([]*plan, []types.UID, error) {
	var superseded []types.UID
	may := func(other types.UID) bool {
		if other == h.UID || !o.supersede(other) || s.ops.active[other] != nil || s.ops.releasing[other] || s.jobOf(other) != nil {
			return false
		}
		if !slices.Contains(superseded, other) {
			superseded = append(superseded, other)
		}
		return true
	}
	plans := make([]*plan, 0, len(reqs))
	for _, r := range reqs {
		if j := s.regions.jobs[r.Device]; j != nil && j.holder == h.UID {
			// ProgramHeld's job: one job per region.
			return nil, nil, &hookJobError{j.busy("prepare again once that has ended")}
		}
		card, port, ok := devs.FindPort(r.Device)
		if !ok {
			return nil, nil, fmt.Errorf("device %s is not on this node (any more): it was unplugged or its card failed discovery", r.Device)
		}
		f := s.facts(h.UID, r.Device, card, port, rec, may)
		p, err := decideDevice(r.Config, f)
		if err != nil {
			return nil, nil, err
		}
		pl := &plan{req: r, card: card, port: port, devicePlan: p}
		if f.ProgrammedForBinding && !p.Program {
			// Loaded before binding, maybe from a registry no longer
			// allowed.
			if r.Config != nil && r.Config.BitstreamRef != "" && s.cfg.Registry != nil {
				if err := s.cfg.Registry.CheckAllowed(r.Config.BitstreamRef); err != nil {
					return nil, nil, fmt.Errorf("device %s: %w", r.Device, err)
				}
			}
			i := slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == r.Device })
			before := rec.Devices[i]
			pl.before = &before
		}
		plans = append(plans, pl)
	}
	return plans, superseded, nil
}

// hookJobError is decidePrepare's refusal of a holder whose device a job
// outside any operation (the hook's) programs: Prepare waits for it.
type hookJobError struct{ error }

func (e *hookJobError) Unwrap() error { return e.error }

// newOp starts a prepare operation of h, a change of its Version.
// Caller holds mu.
func (s *State) newOp(h Holder, cancel context.CancelCauseFunc, o prepareOptions) *op {
	op := &op{holder: h, cancel: cancel, done: make(chan struct{}), beforeBinding: o.beforeBinding}
	s.ops.active[h.UID] = op
	s.changed(h.UID)
	return op
}

// holdsRecord reports whether uid holds every device of its record rec.
// Caller holds mu.
func (s *State) holdsRecord(uid types.UID, rec *ClaimRecord) bool {
	for _, d := range rec.Devices {
		if s.holds[d.Device] != uid {
			return false
		}
	}
	return true
}

func sameDevices(rec *ClaimRecord, reqs []DeviceRequest) bool {
	return slices.EqualFunc(rec.Devices, reqs, func(d DeviceRecord, r DeviceRequest) bool { return d.Device == r.Device })
}
