package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// plan is what Prepare decided for one device.
type plan struct {
	req     DeviceRequest
	card    *discovery.Card
	port    *discovery.Port
	program bool   // a job must (or did) program the region
	afu     string // the AFU the device will carry
	job     *job
}

// Prepare prepares a holder's devices. It is idempotent: a completed
// holder gets the same CDI devices again without reprogramming (unless the
// node rebooted since). A device prepared for another holder is refused,
// whatever the scheduler decided. When programming outlasts PrepareWait,
// Prepare returns an error wrapping ErrInProgress and programming goes on;
// a later call returns its result.
func (s *State) Prepare(ctx context.Context, h Holder, reqs []DeviceRequest, devs *discovery.Result) (Outcome, error) {
	logger := klog.FromContext(ctx)
	uid := string(h.UID)

	s.mu.Lock()
	rec := s.cp.Claims[uid]
	rebooted := rec != nil && rec.BootID != s.bootID
	if rec != nil && rec.Phase == PhaseCompleted && !rebooted && sameDevices(rec, reqs) {
		out, err := s.completed(h.UID, rec, devs)
		s.mu.Unlock()
		return out, err
	}
	for _, r := range reqs {
		if other, ok := s.holders[r.Device]; ok && other != h.UID {
			holder := string(other)
			if o := s.cp.Claims[string(other)]; o != nil {
				holder = fmt.Sprintf("%s/%s (%s)", o.Namespace, o.Name, other)
			}
			s.mu.Unlock()
			return Outcome{}, fmt.Errorf("%w: device %s is prepared for claim %s; it must be unprepared before %s can use it", ErrDeviceHeld, r.Device, holder, h)
		}
	}
	plans := make([]*plan, 0, len(reqs))
	needJobs := false
	for _, r := range reqs {
		p, err := s.plan(h, r, devs, rec, rebooted)
		if err != nil {
			s.mu.Unlock()
			return Outcome{}, err
		}
		plans = append(plans, p)
		needJobs = needJobs || p.program
	}
	if needJobs {
		// Record the hold before programming starts, so a restart knows
		// which devices are being programmed for whom.
		s.record(h, PhaseStarted, plans)
		for _, p := range plans {
			if p.program && p.job == nil {
				p.job = s.startJob(ctx, h, p)
			}
		}
	}
	s.mu.Unlock()
	if needJobs {
		if err := s.persist(); err != nil {
			return Outcome{}, fmt.Errorf("record claim %s: %w", h, err)
		}
	}

	out := Outcome{}
	if needJobs {
		if err := s.wait(ctx, plans); err != nil {
			return out, err
		}
		var errs []error
		s.mu.Lock()
		for _, p := range plans {
			if p.job == nil {
				continue
			}
			out.Programmed = append(out.Programmed, p.job.result)
			if s.jobs[p.req.Device] == p.job {
				delete(s.jobs, p.req.Device)
			}
			if p.job.result.Err != nil {
				errs = append(errs, p.job.result.Err)
			}
		}
		s.mu.Unlock()
		if len(errs) > 0 {
			return out, errors.Join(errs...)
		}
	}

	recs := records(plans)
	devices, err := specDevices(recs, devs)
	if err != nil {
		return out, fmt.Errorf("claim %s: %w", h, err)
	}
	ids := s.cfg.CDI.DeviceIDs(string(h.UID), devices)
	s.mu.Lock()
	for i := range recs {
		recs[i].CDIDeviceID = ids[i]
	}
	s.cp.Claims[uid] = &ClaimRecord{UID: uid, Namespace: h.Namespace, Name: h.Name, Phase: PhaseCompleted, BootID: s.bootID, Devices: recs}
	for _, r := range recs {
		s.holders[r.Device] = h.UID
	}
	s.changed()
	s.mu.Unlock()
	// The spec and the checkpoint are independent durable writes: a crash
	// between them leaves either a completed record whose spec Restore
	// rewrites, or a spec Restore removes. Write them concurrently.
	specErr := make(chan error, 1)
	go func() {
		_, err := s.cfg.CDI.WriteClaimSpec(uid, devices)
		specErr <- err
	}()
	persistErr := s.persist()
	if err := <-specErr; err != nil {
		return out, fmt.Errorf("write CDI spec for claim %s: %w", h, err)
	}
	if persistErr != nil {
		return out, fmt.Errorf("record claim %s: %w", h, persistErr)
	}
	for i, r := range recs {
		out.Devices = append(out.Devices, PreparedDevice{Device: r.Device, Requests: r.Requests, CDIDeviceIDs: []string{ids[i]}, AFUID: r.AFUID})
	}
	logger.V(3).Info("Prepared claim", "claim", klog.KRef(h.Namespace, h.Name), "devices", len(recs))
	return out, nil
}

// completed returns a completed claim's devices, rewriting its CDI spec
// when it went missing. Caller holds mu.
func (s *State) completed(uid types.UID, rec *ClaimRecord, devs *discovery.Result) (Outcome, error) {
	ok, err := s.cfg.CDI.ClaimSpecExists(string(uid))
	if err != nil || !ok {
		if _, err := s.writeSpec(uid, rec.Devices, devs); err != nil {
			return Outcome{}, fmt.Errorf("rewrite CDI spec of claim %s/%s: %w", rec.Namespace, rec.Name, err)
		}
	}
	var out Outcome
	for _, d := range rec.Devices {
		out.Devices = append(out.Devices, PreparedDevice{Device: d.Device, Requests: d.Requests, CDIDeviceIDs: []string{d.CDIDeviceID}, AFUID: d.AFUID})
	}
	return out, nil
}

func sameDevices(rec *ClaimRecord, reqs []DeviceRequest) bool {
	if len(rec.Devices) != len(reqs) {
		return false
	}
	for i := range reqs {
		if rec.Devices[i].Device != reqs[i].Device {
			return false
		}
	}
	return true
}

// plan decides what a device needs. Caller holds mu.
func (s *State) plan(h Holder, r DeviceRequest, devs *discovery.Result, rec *ClaimRecord, rebooted bool) (*plan, error) {
	card, port, ok := devs.FindPort(r.Device)
	if !ok {
		return nil, fmt.Errorf("device %s is not on this node (any more): it was unplugged or its card failed discovery", r.Device)
	}
	p := &plan{req: r, card: card, port: port, afu: port.AFUID}
	// A job this holder started earlier decides, whatever sysfs says now.
	if j := s.jobs[r.Device]; j != nil && j.holder == h.UID {
		p.program, p.afu, p.job = true, j.afu, j
		return p, nil
	}
	cfg := r.Config
	if cfg == nil {
		return p, nil
	}
	if cfg.InterfaceID != "" && cfg.InterfaceID != card.InterfaceID {
		return nil, fmt.Errorf("%w: device %s has interface ID %s but the claim's config asks for %s: select a device with that interface ID or drop interfaceID from the config", program.ErrInterfaceMismatch, r.Device, card.InterfaceID, cfg.InterfaceID)
	}
	p.afu = cfg.AFUID
	switch cfg.Programming {
	case v1alpha1.ProgrammingNever:
		if port.AFUID != cfg.AFUID {
			return nil, fmt.Errorf("%w: device %s carries AFU %s, not %s, and the config says programming: Never: select devices by afuID, or allow programming", ErrAFUNotLoaded, r.Device, orNone(port.AFUID), cfg.AFUID)
		}
	case v1alpha1.ProgrammingAlways:
		p.program = true
	default: // IfNeeded
		// With a pinned digest, "already loaded" means that very file was
		// loaded here; a region loaded from elsewhere is programmed (and
		// the pin checked).
		p.program = port.AFUID != cfg.AFUID || (cfg.SHA256 != "" && s.loadedSHA[r.Device] != cfg.SHA256)
		// After a reboot the region lost what this claim loaded, whatever
		// an earlier record says.
		if rebooted && wasProgrammed(rec, r.Device) {
			p.program = true
		}
	}
	if p.program && !s.cfg.Programmable {
		return nil, fmt.Errorf("%w: device %s carries AFU %s and the claim needs %s, but this node runs with --programmable=false", ErrNotProgrammable, r.Device, orNone(port.AFUID), cfg.AFUID)
	}
	if p.program && s.cfg.Programmer == nil {
		return nil, fmt.Errorf("%w: device %s needs AFU %s but no programmer is configured on this node", ErrNotProgrammable, r.Device, cfg.AFUID)
	}
	return p, nil
}

func wasProgrammed(rec *ClaimRecord, device string) bool {
	if rec == nil {
		return false
	}
	for _, d := range rec.Devices {
		if d.Device == device {
			return d.Programmed
		}
	}
	return false
}

func orNone(afu string) string {
	if afu == "" {
		return "(none readable)"
	}
	return afu
}

// records are the checkpoint's account of what the plans decided.
func records(plans []*plan) []DeviceRecord {
	recs := make([]DeviceRecord, len(plans))
	for i, p := range plans {
		recs[i] = DeviceRecord{Device: p.req.Device, Requests: p.req.Requests, AFUID: p.afu, Programmed: p.program}
	}
	return recs
}

// record writes a claim's hold in the given phase. Caller holds mu.
func (s *State) record(h Holder, phase ClaimPhase, plans []*plan) {
	recs := records(plans)
	for _, r := range recs {
		s.holders[r.Device] = h.UID
	}
	s.cp.Claims[string(h.UID)] = &ClaimRecord{UID: string(h.UID), Namespace: h.Namespace, Name: h.Name, Phase: phase, BootID: s.bootID, Devices: recs}
	s.changed()
}

// startJob starts programming a port in the background. Caller holds mu.
func (s *State) startJob(ctx context.Context, h Holder, p *plan) *job {
	j := &job{holder: h.UID, afu: p.afu, started: time.Now(), done: make(chan struct{})}
	s.jobs[p.req.Device] = j
	portLock := s.ports[p.req.Device]
	if portLock == nil {
		portLock = &sync.Mutex{}
		s.ports[p.req.Device] = portLock
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", klog.KRef(h.Namespace, h.Name), "device", p.req.Device, "afuID", p.afu)
	jobCtx := klog.NewContext(s.ctx, logger)
	cfg := p.req.Config
	go func() {
		defer close(j.done)
		// One region is never programmed twice at once, even when an
		// unprepared holder's job is still running.
		portLock.Lock()
		defer portLock.Unlock()
		j.result = s.program(jobCtx, cfg, p.card, p.port)
		j.result.Device = p.req.Device
		if j.result.Err != nil {
			logger.Error(j.result.Err, "Programming failed")
		} else {
			logger.Info("Programmed region", "bitstream", j.result.Bitstream, "duration", j.result.Duration)
		}
		if s.cfg.OnProgrammed != nil {
			s.cfg.OnProgrammed(j.result)
		}
	}()
	return j
}

// program finds the bitstream in the repository and loads it.
func (s *State) program(ctx context.Context, cfg *v1alpha1.FpgaConfig, card *discovery.Card, port *discovery.Port) Programming {
	start := time.Now()
	res := Programming{AFUID: cfg.AFUID}
	fail := func(err error) Programming {
		res.Err = err
		res.Duration = time.Since(start)
		return res
	}
	if s.cfg.Repository == nil {
		return fail(fmt.Errorf("%w: no bitstream repository is configured on this node", program.ErrNotFound))
	}
	var bs *program.Bitstream
	var err error
	if cfg.Bitstream != "" {
		bs, err = s.cfg.Repository.FindByName(cfg.Bitstream, card.InterfaceID)
		if err == nil && bs.AFUID != cfg.AFUID {
			err = fmt.Errorf("%w: bitstream %s carries AFU %s, not the config's afuID %s", program.ErrInvalidBitstream, cfg.Bitstream, bs.AFUID, cfg.AFUID)
		}
	} else {
		bs, err = s.cfg.Repository.Find(card.InterfaceID, cfg.AFUID)
	}
	if err != nil {
		return fail(err)
	}
	res.Bitstream = bs.Path
	opts := s.cfg.Load
	opts.SHA256 = cfg.SHA256
	loaded, err := program.Load(ctx, s.cfg.Programmer, card, port, bs, opts)
	s.mu.Lock()
	if err == nil {
		s.loadedSHA[port.DeviceName()] = loaded.SHA256
	} else {
		delete(s.loadedSHA, port.DeviceName())
	}
	s.mu.Unlock()
	if err != nil {
		return fail(fmt.Errorf("program %s with AFU %s from %s: %w", port.DeviceName(), cfg.AFUID, bs.Path, err))
	}
	res.SHA256 = loaded.SHA256
	res.Duration = time.Since(start)
	return res
}

// wait waits for the plans' jobs, at most PrepareWait.
func (s *State) wait(ctx context.Context, plans []*plan) error {
	timer := time.NewTimer(s.cfg.PrepareWait)
	defer timer.Stop()
	for _, p := range plans {
		if p.job == nil {
			continue
		}
		select {
		case <-p.job.done:
		case <-timer.C:
			return fmt.Errorf("%w: device %s is being programmed with AFU %s (started %s ago); the kubelet retries and a later call returns the result", ErrInProgress, p.req.Device, p.job.afu, time.Since(p.job.started).Round(time.Second))
		case <-ctx.Done():
			return fmt.Errorf("%w: device %s is being programmed with AFU %s; the call was cancelled: %v", ErrInProgress, p.req.Device, p.job.afu, ctx.Err())
		}
	}
	return nil
}

// Unprepare releases a holder's devices and removes its CDI spec. An
// unknown holder is not an error. A programming job still running for the
// holder finishes in the background; the port stays locked until it does.
func (s *State) Unprepare(ctx context.Context, uid types.UID) error {
	if err := s.cfg.CDI.RemoveClaimSpec(string(uid)); err != nil {
		return fmt.Errorf("remove CDI spec of claim %s: %w", uid, err)
	}
	s.mu.Lock()
	rec, ok := s.cp.Claims[string(uid)]
	if ok {
		for _, d := range rec.Devices {
			if s.holders[d.Device] == uid {
				delete(s.holders, d.Device)
			}
			if j := s.jobs[d.Device]; j != nil && j.holder == uid {
				delete(s.jobs, d.Device)
			}
		}
		delete(s.cp.Claims, string(uid))
		s.changed()
	}
	s.mu.Unlock()
	if !ok {
		return nil
	}
	klog.FromContext(ctx).V(3).Info("Unprepared claim", "claim", klog.KRef(rec.Namespace, rec.Name))
	return s.persist()
}
