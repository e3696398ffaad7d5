package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/bitstream"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// errReleased is the outcome of a job whose holder was released before
// the region was touched.
var errReleased = errors.New("the claim was unprepared before programming started; the region was not programmed")

// errStopping fails a job that would start after the State's context
// ended.
var errStopping = errors.New("the driver is stopping; the region was not programmed, and the next driver process programs it when the kubelet retries")

// job is one programming of one region for one holder.
type job struct {
	holder  types.UID
	device  string
	afu     string
	cfg     *v1alpha1.FpgaConfig
	card    *discovery.Card
	port    *discovery.Port
	started time.Time
	ctx     context.Context // cancelled when the holder is released
	cancel  context.CancelCauseFunc
	logger  klog.Logger
	program bool // false: the region already carries afu, only then runs
	// then, when set, runs after programming and before done closes, so
	// that a release waits for it too.
	then   func(*job)
	done   chan struct{} // closed once result is set and then has run
	result Programming
}

// newJob registers a job programming p's region for h, cancelled with
// ctx. Its caller starts it (runJob) once the hold is durable. Caller
// holds mu.
func (s *State) newJob(ctx context.Context, h Holder, p *plan) *job {
	ctx, cancel := context.WithCancelCause(ctx)
	j := &job{cancel: cancel, program: p.Program,
		holder: h.UID, device: p.req.Device, afu: p.AFU, cfg: p.req.Config,
		card: p.card, port: p.port, started: time.Now(), ctx: ctx, done: make(chan struct{}),
		logger: klog.LoggerWithValues(klog.FromContext(s.ctx), "claim", klog.KRef(h.Namespace, h.Name), "device", p.req.Device, "afuID", p.AFU),
	}
	s.regions.jobs[j.device] = j
	return j
}

// abandonJobs ends, with err, jobs that never ran, so nothing waits for
// them.
func (s *State) abandonJobs(jobs []*job, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		if s.regions.jobs[j.device] == j {
			delete(s.regions.jobs, j.device)
		}
		j.result = Programming{Device: j.device, AFUID: j.afu, Err: err}
		j.cancel(err)
		close(j.done)
	}
}

// jobOf returns a programming job in flight for uid, or nil. Caller holds
// mu.
func (s *State) jobOf(uid types.UID) *job {
	for _, j := range s.regions.jobs {
		if j.holder == uid {
			return j
		}
	}
	return nil
}

// busy is the ErrInProgress of a caller that meets j running; what says
// what happens next.
func (j *job) busy(what string) error {
	return fmt.Errorf("%w: device %s is being programmed with AFU %s (started %s ago); %s", ErrInProgress, j.device, j.afu, time.Since(j.started).Round(time.Second), what)
}

// runJob programs a job's region, serialised with every other programming
// of it, while the job's holder holds the device and is not released.
func (s *State) runJob(j *job) {
	s.mu.Lock()
	lock := s.portLock(j.device)
	s.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	defer close(j.done)
	defer j.cancel(nil)
	defer func() {
		s.mu.Lock()
		if s.regions.jobs[j.device] == j {
			delete(s.regions.jobs, j.device)
		}
		s.recheckSpec(j.holder)
		s.mu.Unlock()
	}()
	s.mu.Lock()
	ok := s.holds[j.device] == j.holder && !s.ops.releasing[j.holder] && j.ctx.Err() == nil
	s.mu.Unlock()
	switch {
	case !ok:
		j.result = Programming{Device: j.device, AFUID: j.afu, Err: fmt.Errorf("device %s: %w", j.device, errReleased)}
		return
	case j.program && s.ctx.Err() != nil:
		j.result = Programming{Device: j.device, AFUID: j.afu, Err: fmt.Errorf("device %s: %w", j.device, errStopping)}
		return
	case j.program:
		s.step(StepProgramming, j.holder)
		j.result = s.program(klog.NewContext(j.ctx, j.logger), j.holder, j.cfg, j.card, j.port)
		j.result.Device = j.device
		s.step(StepProgrammed, j.holder)
		if j.result.Err != nil {
			j.logger.Error(j.result.Err, "Programming failed")
		} else {
			j.logger.Info("Programmed region", "bitstream", j.result.Bitstream, "duration", j.result.Duration)
		}
		if s.cfg.OnProgrammed != nil {
			s.cfg.OnProgrammed(j.result)
		}
	default:
		j.result = Programming{Device: j.device, AFUID: j.afu}
	}
	if j.then != nil {
		j.then(j)
	}
}

// program finds the bitstream and loads it.
func (s *State) program(ctx context.Context, holder types.UID, cfg *v1alpha1.FpgaConfig, card *discovery.Card, port *discovery.Port) Programming {
	start := time.Now()
	res := Programming{AFUID: cfg.AFUID}
	fail := func(err error) Programming {
		res.Err = err
		res.Duration = time.Since(start)
		return res
	}
	finder := bitstream.Finder{Repository: s.cfg.Repository, Registry: s.cfg.Registry, RegistryUnavailable: s.cfg.RegistryUnavailable}
	bs, name, layer, err := finder.Find(ctx, string(holder), cfg, card)
	res.Bitstream, res.LayerDigest = name, layer
	if err != nil {
		return fail(err)
	}
	opts := s.cfg.Load
	opts.SHA256 = cfg.SHA256
	if opts.SHA256 == "" {
		opts.SHA256 = bs.SHA256
	}
	loaded, err := program.Load(ctx, s.cfg.Programmer, card, port, bs, opts)
	s.mu.Lock()
	carried := ""
	if err == nil {
		s.regions.loaded[port.DeviceName()] = loadedFile{afu: cfg.AFUID, sha256: loaded.SHA256, reference: cfg.BitstreamRef, layer: res.LayerDigest, at: time.Now(), took: time.Since(start)}
		carried = res.LayerDigest
	} else {
		delete(s.regions.loaded, port.DeviceName())
	}
	s.mu.Unlock()
	if s.cfg.Registry != nil { // evicted last from the OCI cache
		if cerr := s.cfg.Registry.Carry(port.DeviceName(), carried); cerr != nil {
			klog.FromContext(ctx).Error(cerr, "Recording the cached bitstream a region carries failed", "device", port.DeviceName())
		}
	}
	if err != nil {
		return fail(fmt.Errorf("program %s with AFU %s from %s: %w", port.DeviceName(), cfg.AFUID, res.Bitstream, err))
	}
	res.SHA256 = loaded.SHA256
	res.Duration = time.Since(start)
	return res
}

// loadedFile is what a job loaded into a region, from which OCI reference
// and cached layer, when it ended and how long it took.
type loadedFile struct {
	afu, sha256, reference, layer string
	at                            time.Time
	took                          time.Duration
}

// LastProgramming reports when this process last loaded afuID into device
// and how long that took; ok is false unless that is what it carries.
func (s *State) LastProgramming(device, afuID string) (at time.Time, took time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, found := s.regions.loaded[device]
	if !found || l.afu != afuID || l.at.IsZero() {
		return time.Time{}, 0, false
	}
	return l.at, l.took, true
}

// portLock returns the lock that serialises programming of a device.
// Caller holds mu.
func (s *State) portLock(device string) *sync.Mutex {
	l := s.regions.locks[device]
	if l == nil {
		l = &sync.Mutex{}
		s.regions.locks[device] = l
	}
	return l
}

// lockPorts takes the port locks of recs' devices, in name order, and
// returns their release. Callers must not hold mu or a port lock.
func (s *State) lockPorts(recs []DeviceRecord) (unlock func()) {
	devices := make([]string, 0, len(recs))
	for _, d := range recs {
		devices = append(devices, d.Device)
	}
	slices.Sort(devices)
	devices = slices.Compact(devices)
	locks := make([]*sync.Mutex, len(devices))
	s.mu.Lock()
	for i, d := range devices {
		locks[i] = s.portLock(d)
	}
	s.mu.Unlock()
	for _, l := range locks {
		l.Lock()
	}
	return func() {
		for _, l := range locks {
			l.Unlock()
		}
	}
}
