package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// op is the one operation in flight for a holder: a prepare, or the
// release of an Unprepare.
type op struct {
	holder  Holder
	release bool
	// cancel cancels the prepare's programming jobs when an Unprepare asks
	// for the holder's release.
	cancel context.CancelCauseFunc
	jobs   []*job
	// done is closed once out and err are set.
	done chan struct{}
	out  Outcome
	err  error
	// reported is set once a caller read out.Programmed.
	reported bool
	// beforeBinding: the prepare ends at PhaseProgrammed (BeforeBinding).
	beforeBinding bool
	// call is the kubelet call the operation belongs to (Expect), or nil.
	call *announced
	// refresh: the operation rewrites a stale spec (RefreshSpecs).
	refresh bool
}

// PrepareOption adjusts one Prepare.
type PrepareOption func(*prepareOptions)

type prepareOptions struct {
	supersede     func(types.UID) bool
	rebuild       bool
	beforeBinding bool
	call          *announced
	meanwhile     func(Outcome)
}

// BeforeBinding makes the prepare program what its devices need and
// record the holder as PhaseProgrammed, without a CDI spec: the work of a
// claim allocated with binding conditions, before its pod is bound. The
// kubelet's prepare of the claim later finds the regions programmed and
// only writes the CDI spec. Outcome.Devices is empty.
func BeforeBinding() PrepareOption {
	return func(o *prepareOptions) { o.beforeBinding = true }
}

// Supersede lets the prepare take devices from other holders for which
// may returns true (the legacy endpoint's earlier allocations: the kubelet
// only hands a device out again once its container ended): they are
// released in the same commit, their CDI specs removed. A holder with an
// operation or programming in flight is never superseded.
func Supersede(may func(types.UID) bool) PrepareOption {
	return func(o *prepareOptions) { o.supersede = may }
}

// Rebuild makes a prepare of a completed holder decide again and rewrite
// its record and CDI spec, e.g. because the AFU it recorded is no longer
// loaded.
func Rebuild() PrepareOption {
	return func(o *prepareOptions) { o.rebuild = true }
}

// Meanwhile gives the prepare work that needs its outcome but not its
// durability, such as the caller's answer built from it. When this call
// records the holder's devices itself (nothing to program, no earlier
// record to answer from) and flushes the checkpoint alone, f runs once,
// in the calling goroutine, with the outcome (its Devices as Prepare
// returns them; Programmed lacks a programming before binding that the
// call waited for), after the CDI spec is written and while the record is
// being flushed to the disk. In every other case f does not run: a flush
// shared with other callers has ended by then, and f would only delay
// this prepare's end, which the next flush may wait for.
//
// Prepare may still fail after f ran (the flush failed, an Unprepare
// began meanwhile): f must not change anything the caller reads before
// Prepare has succeeded. f runs while this prepare holds the checkpoint's
// flush: it must be short and must not call the State (a change it made
// would wait for that flush, which waits for f).
func Meanwhile(f func(Outcome)) PrepareOption {
	return func(o *prepareOptions) { o.meanwhile = f }
}

// Prepare prepares a holder's devices. It is idempotent: a completed
// holder gets the same CDI devices again without reprogramming (unless the
// node rebooted since), and calls for one holder racing each other get one
// answer; a prepare without BeforeBinding that meets the holder's
// programming before binding waits for it and then prepares. A device
// another holder holds is refused with ErrDeviceHeld, whatever the
// scheduler decided; of racing prepares of different holders for one
// device exactly one wins. When programming outlasts PrepareWait,
// Prepare returns an error wrapping ErrInProgress and programming goes on;
// a later call returns its result.
func (s *State) Prepare(ctx context.Context, h Holder, reqs []DeviceRequest, devs *discovery.Result, opts ...PrepareOption) (Outcome, error) {
	var o prepareOptions
	for _, f := range opts {
		f(&o)
	}
	if o.supersede == nil {
		o.supersede = func(types.UID) bool { return false }
	}
	o.call = callOf(ctx)
	var before []Programming
	waited := false
	for first := true; ; first = false {
		op, completed, plans, superseded, err := s.decidePrepare(h, reqs, devs, o)
		if first {
			s.arrived(ctx) // in s.ops now, or not committing
		}
		var hook *hookJobError
		switch {
		case errors.As(err, &hook) && !waited:
			// The hook's job on the holder's device: wait for it as an
			// answered prepare does (awaitHolderJobs), then decide anew.
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
			// Nothing to program: no reason to leave the caller.
			s.runPrepare(klog.FromContext(ctx), op, plans, superseded, devs, o.meanwhile)
		case plans != nil:
			go s.runPrepare(klog.FromContext(ctx), op, plans, superseded, devs, nil)
		}
		out, err := s.await(ctx, op)
		out.Programmed = append(before, out.Programmed...)
		if err != nil || !op.beforeBinding || o.beforeBinding {
			return out, err
		}
		// The kubelet's prepare joined the programming before binding,
		// which hands out no devices: now that it ended, prepare on
		// its record.
		before = out.Programmed
	}
}

// decidePrepare is Prepare's critical section: it joins the holder's
// operation in flight, or starts one that answers from a completed record
// (completed), or checks that every device is free, decides what each
// needs and reserves them all for the holder in a new operation. plans is
// nil unless a new operation that prepares was created.
func (s *State) decidePrepare(h Holder, reqs []DeviceRequest, devs *discovery.Result, o prepareOptions) (*op, *ClaimRecord, []*plan, []types.UID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.drainingError("prepare of", h); err != nil {
		return nil, nil, nil, nil, err
	}
	if s.releasing[h.UID] {
		return nil, nil, nil, nil, fmt.Errorf("%w: claim %s is being unprepared; prepare it again once that has finished", ErrReleasing, h)
	}
	if op := s.ops[h.UID]; op != nil {
		return op, nil, nil, nil, nil // join it
	}
	rec := s.cp.Claims[string(h.UID)]
	rebooted := rec != nil && rec.BootID != s.bootID
	switch {
	case rec == nil || rebooted || o.rebuild || !sameDevices(rec, reqs):
	case !s.holdsRecord(h.UID, rec):
		// Being superseded: another holder's prepare reserved its
		// devices; deciding anew refuses them, naming that holder.
	case rec.Phase == PhaseCompleted, rec.Phase == PhaseProgrammed && o.beforeBinding:
		// Answered from the record, in an operation of its own: a
		// release waits for it, and no prepare supersedes the holder,
		// while it rewrites the CDI spec.
		return s.newOp(h, func(error) {}, o), rec.clone(), nil, nil, nil
	}
	var superseded []types.UID
	may := func(other types.UID) bool {
		if other == h.UID || !o.supersede(other) || s.ops[other] != nil || s.releasing[other] || s.hasJobs(other) {
			return false
		}
		if !slices.Contains(superseded, other) {
			superseded = append(superseded, other)
		}
		return true
	}
	plans := make([]*plan, 0, len(reqs))
	for _, r := range reqs {
		if j := s.jobs[r.Device]; j != nil && j.holder == h.UID {
			// One job per region (the hook's, ProgramHeld, is no
			// operation to join): a second would not be seen by a
			// release, WaitIdle or CancelJobs. Another holder's job
			// is refused below as its hold.
			return nil, nil, nil, nil, &hookJobError{j.busy("prepare again once that has ended")}
		}
		card, port, ok := devs.FindPort(r.Device)
		if !ok {
			return nil, nil, nil, nil, fmt.Errorf("device %s is not on this node (any more): it was unplugged or its card failed discovery", r.Device)
		}
		f := s.facts(h.UID, r.Device, card, port, rec, may)
		p, err := decideDevice(r.Config, f)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		pl := &plan{req: r, card: card, port: port, devicePlan: p}
		if f.ProgrammedForBinding && !p.Program {
			// Loaded before binding, maybe by a process that allowed
			// more registries: the claim gets it only from an allowed one.
			if r.Config != nil && r.Config.BitstreamRef != "" && s.cfg.Registry != nil {
				if err := s.cfg.Registry.CheckAllowed(r.Config.BitstreamRef); err != nil {
					return nil, nil, nil, nil, fmt.Errorf("device %s: %w", r.Device, err)
				}
			}
			i := slices.IndexFunc(rec.Devices, func(d DeviceRecord) bool { return d.Device == r.Device })
			before := rec.Devices[i]
			pl.before = &before
		}
		plans = append(plans, pl)
	}
	// A stopping daemon does not cut programming in flight short (a
	// region left half programmed for the next process): jobs outlive
	// s.ctx, WaitIdle waits for them, and runJob starts none once s.ctx
	// has ended.
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

// hookJobError is decidePrepare's refusal of a holder whose device a job
// outside any operation (the hook's) programs: Prepare waits for it.
type hookJobError struct{ error }

func (e *hookJobError) Unwrap() error { return e.error }

// newOp starts a prepare operation of h, a change of its Version.
// Caller holds mu.
func (s *State) newOp(h Holder, cancel context.CancelCauseFunc, o prepareOptions) *op {
	op := &op{holder: h, cancel: cancel, done: make(chan struct{}), beforeBinding: o.beforeBinding, call: o.call}
	s.ops[h.UID] = op
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

// runPrepare runs a new prepare operation: it records the hold on disk
// before any region is touched, runs the programming jobs, then writes the
// CDI spec and commits the completed record, releasing superseded holders
// in the same commit.
func (s *State) runPrepare(logger klog.Logger, op *op, plans []*plan, superseded []types.UID, devs *discovery.Result, meanwhile func(Outcome)) {
	h := op.holder
	logger = klog.LoggerWithValues(logger, "claim", klog.KRef(h.Namespace, h.Name))
	if err := s.holdLoaded(h.UID, plans); err != nil {
		err = fmt.Errorf("claim %s: %w", h, err)
		s.abandonJobs(op.jobs, err)
		s.finish(op, Outcome{}, err)
		return
	}
	if len(op.jobs) > 0 {
		s.mu.Lock()
		undo := s.undoRecords(append([]types.UID{h.UID}, superseded...))
		prev := s.cp.Claims[string(h.UID)]
		wasCompleted := prev != nil && prev.Phase == PhaseCompleted
		s.mu.Unlock()
		err := s.commit(op.call, func(cp *Checkpoint) {
			// An earlier record of the holder (another allocation of
			// the claim, programmed before binding) frees the devices
			// the plans do not name. Superseded holders are released
			// here, not after programming: one device, one holder, on
			// the disk too.
			s.dropRecord(h.UID)
			for _, other := range superseded {
				s.dropRecord(other)
			}
			rec := s.record(h, PhaseStarted, plans)
			cp.Claims[string(h.UID)] = rec
			for _, d := range rec.Devices {
				s.holds[d.Device] = h.UID
			}
		})
		if err != nil {
			// Memory took the change the disk may not have: put back
			// the records whose CDI specs stay.
			if uerr := s.commit(op.call, undo); uerr != nil {
				logger.Error(uerr, "Undoing the record of a claim whose programming could not start failed; the next flush or a restart corrects it")
			}
			err = fmt.Errorf("record claim %s before programming: %w", h, err)
			s.abandonJobs(op.jobs, err)
			s.finish(op, Outcome{}, err)
			return
		}
		s.step(StepStarted, h.UID)
		// A completed record replaced (programming again after a reboot,
		// a rebuild) takes its CDI spec along: a spec only for a
		// completed record, also when this programming fails.
		if wasCompleted {
			if err := s.cfg.CDI.RemoveClaimSpec(string(h.UID)); err != nil {
				logger.Error(err, "Removing the CDI spec of the claim, programmed again, failed; the next start removes it unless the claim is prepared by then")
			}
		}
		s.removeSupersededSpecs(logger, superseded)
		superseded = nil
		for _, j := range op.jobs {
			go s.runJob(j)
		}
		var out Outcome
		var errs []error
		for _, j := range op.jobs {
			<-j.done
			out.Programmed = append(out.Programmed, j.result)
			if j.result.Err != nil {
				errs = append(errs, j.result.Err)
			}
		}
		if len(errs) > 0 {
			// The record stays (PhaseStarted): the devices remain the
			// holder's, and a later prepare programs again.
			s.finish(op, out, errors.Join(errs...))
			return
		}
		op.out.Programmed = out.Programmed
	}
	s.mu.Lock()
	releasing := s.releasing[h.UID]
	s.mu.Unlock()
	if op.beforeBinding {
		err := s.commit(op.call, func(cp *Checkpoint) {
			s.dropRecord(h.UID)
			rec := s.record(h, PhaseProgrammed, plans)
			cp.Claims[string(h.UID)] = rec
			for _, d := range rec.Devices {
				s.holds[d.Device] = h.UID
			}
		})
		if err == nil && releasing {
			err = fmt.Errorf("%w: claim %s was unprepared while it was being programmed", ErrReleasing, h)
		}
		s.finish(op, op.out, err)
		return
	}
	recs := s.recordDevices(plans)
	devices, err := specDevices(recs, devs)
	if releasing || err != nil {
		if releasing {
			err = fmt.Errorf("%w: claim %s was unprepared while it was being prepared", ErrReleasing, h)
		}
		s.finish(op, op.out, fmt.Errorf("claim %s: %w", h, err))
		return
	}
	ids := s.cfg.CDI.DeviceIDs(string(h.UID), devices)
	for i := range recs {
		recs[i].CDIDeviceID = ids[i]
	}
	// The completed record and the CDI spec go to the disk at once: a
	// crash between them leaves a completed record whose spec Restore
	// rewrites, or a spec Restore removes. The answer waits for both.
	s.mu.Lock()
	undo := s.undoRecords(append([]types.UID{h.UID}, superseded...))
	gen := s.update(func(cp *Checkpoint) {
		for _, other := range superseded {
			s.dropRecord(other)
		}
		s.dropRecord(h.UID)
		cp.Claims[string(h.UID)] = &ClaimRecord{UID: string(h.UID), Namespace: h.Namespace, Name: h.Name, Phase: PhaseCompleted, BootID: s.bootID, Devices: recs}
		for _, d := range recs {
			s.holds[d.Device] = h.UID
		}
	})
	s.mu.Unlock()
	// The spec is written while the checkpoint is flushed: in this
	// goroutine while its own flush runs in the kernel when no other
	// caller is flushing, else in another goroutine (the flush may wait
	// for other callers first). A flush left running (flushing) hides the
	// caller's Meanwhile work too; any other has ended before startSync
	// returns.
	written := make(chan error, 1)
	writeSpec := func() {
		_, err := s.cfg.CDI.WriteClaimSpec(string(h.UID), devices)
		if err == nil {
			s.step(StepSpecWritten, h.UID)
		}
		written <- err
	}
	alone := s.journal.waiting() == 0
	if !alone {
		go writeSpec()
	}
	wait, flushing := s.startSync(gen, op.call, alone)
	if alone {
		writeSpec()
	}
	specErr := <-written
	out := op.out
	if specErr == nil {
		// What needs the spec but not the flush is done before the
		// wait for it.
		s.noteWritten(h.UID, recs, devs)
		for i, r := range recs {
			out.Devices = append(out.Devices, PreparedDevice{Device: r.Device, Requests: r.Requests, CDIDeviceIDs: []string{ids[i]}, AFUID: r.AFUID})
		}
		if flushing && meanwhile != nil {
			meanwhile(out)
		}
	}
	err = wait()
	if specErr != nil {
		if uerr := s.commit(op.call, undo); uerr != nil {
			logger.Error(uerr, "Undoing the record of a claim whose CDI spec could not be written failed; the next prepare or a restart corrects it")
		}
		s.finish(op, op.out, fmt.Errorf("write CDI spec for claim %s: %w", h, specErr))
		return
	}
	s.removeSupersededSpecs(logger, superseded)
	if err != nil {
		s.finish(op, op.out, fmt.Errorf("record claim %s: %w", h, err))
		return
	}
	s.step(StepPrepared, h.UID)
	logger.V(3).Info("Prepared claim", "devices", len(recs), "superseded", superseded)
	s.finish(op, out, nil)
}

// removeSupersededSpecs removes the CDI specs of holders a prepare
// superseded, once their release is recorded, and announces the devices
// they held that the prepare does not (Subscribe).
func (s *State) removeSupersededSpecs(logger klog.Logger, superseded []types.UID) {
	if len(superseded) == 0 {
		return
	}
	defer s.notify()
	for _, other := range superseded {
		if err := s.cfg.CDI.RemoveClaimSpec(string(other)); err != nil {
			logger.Error(err, "Removing the CDI spec of a superseded holder failed; the next start removes it", "holder", other)
		}
	}
	s.mu.Lock()
	for _, other := range superseded {
		delete(s.written, other)
		s.forgetVersion(other)
	}
	s.mu.Unlock()
}

// undoRecords returns a change that puts back the records of uids as they
// are now (or removes them when absent), with their holds. Caller holds
// mu.
func (s *State) undoRecords(uids []types.UID) func(*Checkpoint) {
	prev := map[types.UID]*ClaimRecord{}
	for _, uid := range uids {
		if rec := s.cp.Claims[string(uid)]; rec != nil {
			prev[uid] = rec.clone()
		}
	}
	return func(cp *Checkpoint) {
		for _, uid := range uids {
			s.dropRecord(uid)
		}
		for uid, rec := range prev {
			cp.Claims[string(uid)] = rec
			for _, d := range rec.Devices {
				s.holds[d.Device] = uid
			}
		}
	}
}

// finish ends an operation with its outcome. On failure, devices the
// operation reserved that no record holds for the holder are free again.
// A success of a holder an Unprepare began to release meanwhile becomes
// ErrReleasing: no caller is handed a hold a release is freeing.
func (s *State) finish(op *op, out Outcome, err error) {
	if s.settle(op, out, err) {
		// What it reserved, and what an undo of its record freed, is
		// free again: devices another holder may take now.
		s.notify()
	}
}

// settle is finish under mu; it reports whether the operation failed.
func (s *State) settle(op *op, out Outcome, err error) (failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !op.release && s.releasing[op.holder.UID] {
		// Checked where the answer is made: a release that began after
		// the operation's earlier look (its Version unchanged then)
		// would free a hold answered to the caller.
		err = fmt.Errorf("%w: claim %s was unprepared while it was being prepared", ErrReleasing, op.holder)
		out.Devices = nil
	}
	op.out, op.err = out, err
	if err != nil {
		s.reholdFromRecords(op.holder.UID)
	}
	close(op.done)
	s.journal.wake() // one operation fewer to wait for
	if !op.refresh {
		// A spec rewrite changes no hold.
		s.changed(op.holder.UID)
	}
	if len(out.Programmed) == 0 && !op.release {
		op.reported = true
		delete(s.ops, op.holder.UID)
		s.forgetVersion(op.holder.UID)
		if err == nil || !op.refresh {
			s.recheckSpec(op.holder.UID)
		}
	}
	return err != nil
}

// await waits for a prepare operation, at most PrepareWait while it
// programs, and returns its outcome. The first caller to see a finished
// operation reports its programming results and retires it.
func (s *State) await(ctx context.Context, op *op) (Outcome, error) {
	timer := time.NewTimer(s.cfg.PrepareWait)
	defer timer.Stop()
	select {
	case <-op.done:
	case <-timer.C:
		return Outcome{}, s.inProgress(op, "the kubelet retries and a later call returns the result")
	case <-ctx.Done():
		return Outcome{}, s.inProgress(op, fmt.Sprintf("the call was cancelled: %v", context.Cause(ctx)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := op.out
	if op.reported {
		out.Programmed = nil
	}
	op.reported = true
	if op.err == nil {
		// An answer handed out now (maybe long after the operation
		// ended) is a change a release decided on earlier evidence
		// must see.
		s.changed(op.holder.UID)
	}
	if s.ops[op.holder.UID] == op {
		delete(s.ops, op.holder.UID)
		s.recheckSpec(op.holder.UID)
	}
	s.forgetVersion(op.holder.UID)
	return out, op.err
}

// awaitHolderJobs waits, at most PrepareWait and while ctx lasts, until
// no programming job of uid runs.
func (s *State) awaitHolderJobs(ctx context.Context, uid types.UID) error {
	timer := time.NewTimer(s.cfg.PrepareWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		running := s.jobOf(uid)
		s.mu.Unlock()
		if running == nil {
			return nil
		}
		if s.onAwaitJob != nil {
			s.onAwaitJob(uid)
		}
		what := "the kubelet retries and a later call returns the result"
		select {
		case <-running.done:
			continue
		case <-timer.C:
		case <-ctx.Done():
			what = fmt.Sprintf("the call was cancelled: %v", context.Cause(ctx))
		}
		return running.busy(what)
	}
}

// inProgress describes an operation still running.
func (s *State) inProgress(op *op, what string) error {
	for _, j := range op.jobs {
		select {
		case <-j.done:
			continue
		default:
		}
		return j.busy(what)
	}
	return fmt.Errorf("%w: claim %s is being prepared; %s", ErrInProgress, op.holder, what)
}

// answer runs an operation that answers a prepare from the holder's
// record rec, completed (or programmed, for a prepare before binding),
// once every change is on the disk.
func (s *State) answer(ctx context.Context, op *op, rec *ClaimRecord, reqs []DeviceRequest, devs *discovery.Result) (Outcome, error) {
	h := op.holder
	var out Outcome
	err := s.durable(op.call)
	switch {
	case err != nil:
		err = fmt.Errorf("record claim %s: %w", h, err)
	case rec.Phase == PhaseProgrammed:
		// Programmed before binding already.
	default:
		// completed waits for the holder's programming (the hook's):
		// not longer than any prepare does.
		if err = s.awaitHolderJobs(ctx, h.UID); err == nil {
			out, err = s.completed(h, rec, reqs, devs)
		}
	}
	s.finish(op, out, err)
	return op.out, op.err
}

// completed answers a prepare of a completed holder, rewriting its CDI
// spec from its devices' nodes as discovery shows them now: a spec that
// went missing, or one written before the node's cards were enumerated
// anew, whose nodes now belong to other ports. A device whose record has no request names
// (a record rebuilt from a CDI spec after damage, which has none) is
// answered with those of reqs, so that the kubelet hands it to the
// containers that asked.
//
// It waits for a programming job of the holder's devices (the hook's,
// ProgramHeld, whose recordAFU writes the spec too) and writes the spec
// from the record as it is then: never from an older copy after that job
// wrote the AFU it loaded.
func (s *State) completed(h Holder, rec *ClaimRecord, reqs []DeviceRequest, devs *discovery.Result) (Outcome, error) {
	if s.onCompleted != nil {
		s.onCompleted(h.UID)
	}
	unlock := s.lockPorts(rec.Devices)
	defer unlock()
	rec = rec.clone()
	s.mu.Lock()
	if cur := s.cp.Claims[string(h.UID)]; cur != nil {
		for i, d := range rec.Devices {
			if j := slices.IndexFunc(cur.Devices, func(c DeviceRecord) bool { return c.Device == d.Device }); j >= 0 {
				rec.Devices[i].AFUID = cur.Devices[j].AFUID
			}
		}
	}
	written, known := s.written[h.UID]
	s.mu.Unlock()
	granted := nodeList(written)
	if !known {
		// Not written by this process (its write at Restore failed):
		// the spec on the disk is what containers were given.
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

// record is a holder's record for its plans in the given phase.
func (s *State) record(h Holder, phase ClaimPhase, plans []*plan) *ClaimRecord {
	return &ClaimRecord{UID: string(h.UID), Namespace: h.Namespace, Name: h.Name, Phase: phase, BootID: s.bootID, Devices: s.recordDevices(plans)}
}

// recordDevices is the checkpoint's account of what the plans decided and
// what their finished jobs loaded.
func (s *State) recordDevices(plans []*plan) []DeviceRecord {
	recs := make([]DeviceRecord, len(plans))
	for i, p := range plans {
		recs[i] = DeviceRecord{Device: p.req.Device, Requests: p.req.Requests, AFUID: p.AFU, Programmed: p.Program,
			Bitstream: p.Bitstream, SHA256: p.SHA256, LayerDigest: p.Layer}
		if b := p.before; b != nil {
			// Loaded for the holder before binding: a reboot erases it,
			// and the OCI cache keeps its file.
			recs[i].Programmed, recs[i].Bitstream, recs[i].SHA256, recs[i].LayerDigest = b.Programmed, b.Bitstream, b.SHA256, b.LayerDigest
		}
		if j := p.job; j != nil {
			select {
			case <-j.done:
				if j.result.Err == nil {
					recs[i].Bitstream, recs[i].SHA256, recs[i].LayerDigest = j.result.Bitstream, j.result.SHA256, j.result.LayerDigest
				}
			default:
			}
		}
	}
	return recs
}

// holdLoaded holds for uid, in the OCI cache, the layers of the files the
// plans find loaded from their configs' references, before any record
// names them: a claim that needs no programming keeps its file cached as
// one whose job pulled it does, until its release.
func (s *State) holdLoaded(uid types.UID, plans []*plan) error {
	for _, p := range plans {
		if p.Layer == "" || s.cfg.Registry == nil {
			continue
		}
		if err := s.cfg.Registry.Hold(string(uid), p.Layer); err != nil {
			return fmt.Errorf("hold the cached bitstream of device %s: %w", p.req.Device, err)
		}
	}
	return nil
}

// reholdFromRecords gives every device reserved for uid that uid's record
// does not hold back to the record that holds it, or frees it: what an
// operation that failed before its commit reserved is undone. Caller holds
// mu.
func (s *State) reholdFromRecords(uid types.UID) {
	owner := map[string]types.UID{}
	for other, rec := range s.cp.Claims {
		for _, d := range rec.Devices {
			owner[d.Device] = types.UID(other)
		}
	}
	for device, h := range s.holds {
		if h != uid {
			continue
		}
		if o, ok := owner[device]; ok {
			s.holds[device] = o
		} else {
			delete(s.holds, device)
		}
	}
}

// dropRecord removes a holder's record and frees the devices it held.
// Caller holds mu, within an update.
func (s *State) dropRecord(uid types.UID) {
	rec := s.cp.Claims[string(uid)]
	if rec == nil {
		return
	}
	for _, d := range rec.Devices {
		if s.holds[d.Device] == uid {
			delete(s.holds, d.Device)
		}
	}
	delete(s.cp.Claims, string(uid))
	delete(s.vanished, uid)
}

// specDevices resolves a holder's device records to CDI devices.
func specDevices(recs []DeviceRecord, devs *discovery.Result) ([]cdi.Device, error) {
	devices := make([]cdi.Device, 0, len(recs))
	for _, r := range recs {
		card, port, ok := devs.FindPort(r.Device)
		if !ok {
			return nil, fmt.Errorf("device %s is not on this node any more", r.Device)
		}
		devices = append(devices, cdi.NewDevice(card, port, r.AFUID))
	}
	return devices, nil
}

// writeSpec writes the CDI spec for a holder's devices and returns the CDI
// device IDs in device order.
func (s *State) writeSpec(h Holder, recs []DeviceRecord, devs *discovery.Result) ([]string, error) {
	devices, err := specDevices(recs, devs)
	if err != nil {
		return nil, err
	}
	ids, err := s.cfg.CDI.WriteClaimSpec(string(h.UID), devices)
	if err == nil {
		s.noteWritten(h.UID, recs, devs)
	}
	return ids, err
}
