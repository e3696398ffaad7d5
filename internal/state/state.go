// Package state is the node's single record of which holder (a
// ResourceClaim, or a legacy device-plugin allocation) holds which FPGA
// device. The DRA plugin, the legacy device-plugin endpoint, the
// programming hook and the admin CLI all go through one State, so a device
// held for one of them is refused to the others.
//
// Every change follows the same three steps:
//
//   - decide (decide.go): under one lock, check that the devices are free,
//     choose what each needs (the pure policy in decideDevice) and reserve
//     them for the holder in the same critical section;
//   - run (prepare.go, job.go): program regions, one job per device, with
//     no lock held;
//   - commit (commit.go): the only place the checkpoint changes; concurrent
//     commits share one flush (group commit).
//
// A prepare answers only after its commit is on disk; an unprepare frees a
// device only after every programming job for its holder has ended.
package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// Defaults for Config.
const (
	DefaultPrepareWait = 20 * time.Second
	DefaultReleaseWait = 20 * time.Second
)

// Config wires a State.
type Config struct {
	// CheckpointPath is the checkpoint file (in the plugin data directory).
	CheckpointPath string
	// BootIDPath is /proc/sys/kernel/random/boot_id below the node root.
	BootIDPath string
	CDI        *cdi.Writer
	Repository *program.Repository
	// Registry fetches bitstreams a config names by OCI reference
	// (bitstreamRef); nil refuses such configs, saying
	// RegistryUnavailable.
	Registry            *oci.Puller
	RegistryUnavailable string
	Programmer          program.Programmer
	// Programmable is false when the node forbids reprogramming.
	Programmable bool
	// PrepareWait bounds how long one Prepare waits for programming before
	// it reports ErrInProgress (the kubelet gives a call 45 s);
	// DefaultPrepareWait when zero.
	PrepareWait time.Duration
	// ReleaseWait bounds how long one Unprepare waits for a programming
	// job of the holder to end before it reports ErrReleasing;
	// DefaultReleaseWait when zero.
	ReleaseWait time.Duration
	Load        program.LoadOptions
	// OnProgrammed runs after every programming job (successful or not),
	// so the new AFU ID is re-read and republished and the outcome counted.
	// It runs with the region locked: it must not wait for the State.
	OnProgrammed func(Programming)
	// OnStep, when set, runs at each step that changes what the node holds
	// or what a region carries (see Step), with the holder concerned. It
	// is for tracing and fault injection: tests kill the process there.
	OnStep func(step Step, holder types.UID)
	// OnRenumbered, when set, runs (without the State's lock) once stale
	// nodes were added to a holder's record: RenumberedDevices changed,
	// maybe outside RefreshSpecs (a prepare's answer, a background
	// rewrite), and the device taints must be published again.
	OnRenumbered func()
	// SkipSync writes the checkpoint without flushing it to the disk. A
	// crash may then lose prepared claims: only for benchmarks that
	// measure what the flush costs and for throwaway simulated nodes.
	SkipSync bool
}

// Step names a point in a prepare, a programming or an unprepare where
// Config.OnStep runs.
type Step string

const (
	// StepReserved: the devices are reserved for the holder in memory.
	StepReserved Step = "reserved"
	// StepStarted: the holder's record (PhaseStarted) is on disk and
	// programming may begin.
	StepStarted Step = "started"
	// StepProgramming: a region is about to be programmed.
	StepProgramming Step = "programming"
	// StepProgrammed: the programmer returned (successfully or not).
	StepProgrammed Step = "programmed"
	// StepSpecWritten: the holder's CDI spec is written, its record not
	// yet committed.
	StepSpecWritten Step = "spec-written"
	// StepPrepared: the completed record is on disk; the answer follows.
	StepPrepared Step = "prepared"
	// StepSpecRemoved: an unprepare removed the CDI spec; the record is
	// not yet deleted.
	StepSpecRemoved Step = "spec-removed"
	// StepReleased: the record's removal is on disk; the devices are free.
	StepReleased Step = "released"
	// StepRenumbered: stale nodes were added to the holder's record.
	StepRenumbered Step = "renumbered"
)

// Holder identifies who prepares devices: a ResourceClaim, or for the
// legacy endpoint a synthetic holder.
type Holder struct {
	UID       types.UID
	Namespace string
	Name      string
}

func (h Holder) String() string { return fmt.Sprintf("%s/%s (%s)", h.Namespace, h.Name, h.UID) }

// DeviceRequest is one allocated device of a claim with the configuration
// that applies to it.
type DeviceRequest struct {
	Device   string
	Requests []string
	// Config is the FpgaConfig for the device; nil hands the port over as
	// it is.
	Config *v1alpha1.FpgaConfig
}

// PreparedDevice is what the kubelet gets for one device.
type PreparedDevice struct {
	Device       string
	Requests     []string
	CDIDeviceIDs []string
	AFUID        string
}

// Programming is the outcome of one programming job, for events and
// metrics.
type Programming struct {
	Device string
	AFUID  string
	// Bitstream is the file loaded: its path in the repository or its OCI
	// reference.
	Bitstream string
	// SHA256 is the digest of the file that was loaded; LayerDigest the
	// OCI layer it came from ("" from the repository).
	SHA256      string
	LayerDigest string
	Duration    time.Duration
	Err         error
}

// loadedFile is what a job loaded into a region: reference and layer
// name the OCI reference and cached layer it came from, if any.
type loadedFile struct {
	afu       string
	sha256    string
	reference string
	layer     string
	// at is when programming ended, took how long it ran.
	at   time.Time
	took time.Duration
}

// LastProgramming reports when this process last loaded afuID into device
// and how long that took; ok is false when it did not, or loaded
// something else there since.
func (s *State) LastProgramming(device, afuID string) (at time.Time, took time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, found := s.loaded[device]
	if !found || l.afu != afuID || l.at.IsZero() {
		return time.Time{}, 0, false
	}
	return l.at, l.took, true
}

// Outcome is the result of one Prepare.
type Outcome struct {
	Devices []PreparedDevice
	// Programmed lists the programming jobs whose results this call is
	// the first to report (finished successfully or not).
	Programmed []Programming
}

var (
	// ErrInProgress: programming is still running; call Prepare again.
	ErrInProgress = errors.New("programming in progress")
	// ErrDeviceHeld: a device is held by another holder.
	ErrDeviceHeld = errors.New("device already prepared for another claim")
	// ErrReleasing: the holder is being unprepared and a programming job
	// for it is still running; the devices are freed when it ends. Call
	// Unprepare again.
	ErrReleasing = errors.New("still releasing")
	// ErrNotProgrammable: the claim needs programming the node forbids.
	ErrNotProgrammable = errors.New("programming forbidden on this node")
	// ErrAFUNotLoaded: programming: Never, and the AFU is not there.
	ErrAFUNotLoaded = errors.New("accelerator function not loaded")
	// ErrChanged: Unprepare with IfUnchanged found the holder prepared
	// since; nothing was released.
	ErrChanged = errors.New("holder changed")
	// ErrNotHeld: a device is not prepared for the holder that asked.
	ErrNotHeld = errors.New("device not prepared for this holder")
	// ErrDraining: the State takes no more work (Drain); the caller's
	// retry reaches the process that takes the node over.
	ErrDraining = errors.New("the driver is stopping on this node")
)

// State is safe for concurrent use. Operations of distinct holders run in
// parallel; the operations of one holder are one at a time (a second
// prepare of the same claim joins the first and gets its answer);
// programming of one region is serialised.
type State struct {
	cfg    Config
	ctx    context.Context // outlives requests: operations and jobs run in it
	bootID string

	mu sync.Mutex
	cp *Checkpoint
	// holds says who holds each device: reserved by an operation in
	// flight, prepared (a record in cp) or being released. Every device of
	// a record in cp is held by that record's holder.
	holds map[string]types.UID
	// ops is the operation in flight for a holder, or one that finished
	// and whose outcome no caller has read yet.
	ops map[types.UID]*op
	// releasing marks holders an Unprepare is releasing.
	releasing map[types.UID]bool
	// jobs is the programming job in flight for a device.
	jobs  map[string]*job
	ports map[string]*sync.Mutex
	// loaded is what this process last loaded into each device's region:
	// a claim that pins a digest or names an OCI reference is programmed
	// unless it matches.
	loaded map[string]loadedFile
	// specDevs is the newest discovery result RefreshSpecs or Restore
	// saw; written is, for each holder whose CDI spec this process
	// wrote, the device nodes it was written from (nodesOf). A completed
	// holder whose written differs from specDevs has a stale spec.
	specDevs  *discovery.Result
	specNodes map[string]string // nodesIn(specDevs)
	written   map[types.UID]string
	// vanished are, by holder, nodes its spec gave that no port had
	// when the spec was rewritten without them (noteGone).
	vanished map[types.UID][]string
	// onCompleted, when set, is called as completed begins, and
	// onAwaitJob as a prepare starts waiting for a programming job of
	// the holder's outside its operation (awaitHolderJobs) (tests).
	onCompleted, onAwaitJob func(types.UID)
	// gen counts changes of cp; see commit.go.
	gen uint64
	// versions is the Version of each holder with a record or an
	// operation; lastVersion is the latest one handed out.
	versions    map[types.UID]Version
	lastVersion Version

	// journal group-commits the checkpoint.
	journal journal
	// draining: the State takes no more work (Drain).
	draining bool
	// idle: WaitIdle returned while draining; no flush starts after.
	idle bool
	// listeners run when holds were released or stale device numbers
	// noted (Subscribe).
	listenMu  sync.Mutex
	listeners map[int]func()
	nextID    int
	// damaged is why the checkpoint was found damaged at start ("" when it
	// was not): Restore then takes CDI specs as evidence of holds and
	// deletes none.
	damaged string
}

// New loads the checkpoint and returns a State. It does not touch CDI
// specs or devices: call Restore once devices are known. A damaged
// checkpoint is no error: New returns it as warning (wrapping
// ErrCorruptCheckpoint) and Restore recovers what the node still shows.
// A checkpoint written by a newer driver fails with ErrNewerCheckpoint.
func New(ctx context.Context, cfg Config) (s *State, warning error, err error) {
	if cfg.PrepareWait <= 0 {
		cfg.PrepareWait = DefaultPrepareWait
	}
	if cfg.ReleaseWait <= 0 {
		cfg.ReleaseWait = DefaultReleaseWait
	}
	if cfg.CDI == nil {
		return nil, nil, errors.New("state: a CDI writer is required")
	}
	bootID, err := readBootID(ctx, cfg.BootIDPath)
	if err != nil {
		return nil, nil, err
	}
	cpFile, cp, err := OpenCheckpoint(cfg.CheckpointPath)
	if err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
		return nil, nil, err
	}
	warning = err
	if err := cpFile.setFlush(!cfg.SkipSync); err != nil {
		return nil, nil, err
	}
	s = &State{
		cfg:       cfg,
		ctx:       ctx,
		bootID:    bootID,
		cp:        cp,
		holds:     map[string]types.UID{},
		ops:       map[types.UID]*op{},
		releasing: map[types.UID]bool{},
		versions:  map[types.UID]Version{},
		jobs:      map[string]*job{},
		ports:     map[string]*sync.Mutex{},
		loaded:    map[string]loadedFile{},
		written:   map[types.UID]string{},
		vanished:  map[types.UID][]string{},
		journal:   journal{file: cpFile, arrived: make(chan struct{}, 1), maxGather: maxGather, streamGap: streamGap},
	}
	if warning != nil {
		s.damaged = warning.Error()
	}
	klog.FromContext(ctx).Info("Checkpoint opened", "path", cfg.CheckpointPath, "claims", len(cp.Claims), "writes", cpFile.WriteMode())
	for uid, c := range cp.Claims {
		for _, d := range c.Devices {
			s.holds[d.Device] = types.UID(uid)
		}
	}
	return s, warning, nil
}

// readBootID reads the boot ID at path ("" without), within
// discovery.DefaultReadTimeout and ctx.
func readBootID(ctx context.Context, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := discovery.ReadBounded(ctx, path, discovery.DefaultReadTimeout, func() ([]byte, error) { return os.ReadFile(path) })
	if err != nil {
		return "", fmt.Errorf("read boot ID %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// BootID is the boot ID read at start.
func (s *State) BootID() string { return s.bootID }

// Holders returns which holder holds each device, reservations of
// operations in flight included.
func (s *State) Holders() map[string]types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.holds)
}

// Records returns a copy of every holder's record, ordered by UID.
func (s *State) Records() []ClaimRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ClaimRecord, 0, len(s.cp.Claims))
	for _, rec := range s.cp.Claims {
		out = append(out, *rec.clone())
	}
	slices.SortFunc(out, func(a, b ClaimRecord) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// Claim returns a copy of a holder's record.
func (s *State) Claim(uid types.UID) (ClaimRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.cp.Claims[string(uid)]
	if !ok {
		return ClaimRecord{}, false
	}
	return *rec.clone(), true
}

// Version identifies the state of a holder's hold: it changes whenever a
// prepare of the holder begins (answered from its record or not) and
// whenever one ends, and never returns to an earlier value while the
// holder has a record or an operation. It is zero until the holder's
// first prepare in this process, and again once nothing of it is left.
type Version uint64

// Version returns uid's Version. Read before the evidence a release is
// decided on, and passed to Unprepare with IfUnchanged, it keeps a
// prepare that came meanwhile from being released.
func (s *State) Version(uid types.UID) Version {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[uid]
}

// changed gives uid a new Version. Caller holds mu.
func (s *State) changed(uid types.UID) {
	s.lastVersion++
	s.versions[uid] = s.lastVersion
}

// forgetVersion drops uid's Version once nothing of uid is left: no
// record, no operation, no job. Caller holds mu.
func (s *State) forgetVersion(uid types.UID) {
	if _, recorded := s.cp.Claims[string(uid)]; !recorded && s.ops[uid] == nil && !s.hasJobs(uid) {
		delete(s.versions, uid)
	}
}

// CheckpointSyncs returns how many times the checkpoint was flushed to
// the disk since New.
func (s *State) CheckpointSyncs() uint64 { return s.journal.syncs.Load() }

// Drain makes the State take no more work: every Prepare, Unprepare and
// ProgramHeld that begins afterwards fails with ErrDraining, and no CDI
// spec rewrite starts; what began before runs on, and WaitIdle waits for
// it. A process that hands the node to another (a stopping daemon) calls
// Drain once it stopped serving, then WaitIdle, before it releases the
// state lock: a call its servers were still handling when they stopped
// then changes nothing after the other process took over.
func (s *State) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
}

// drainingError is ErrDraining for what of holder was asked, when the
// State drains; nil otherwise. Caller holds mu.
func (s *State) drainingError(what string, holder any) error {
	if !s.draining {
		return nil
	}
	return fmt.Errorf("%w: %s %v refused; retry", ErrDraining, what, holder)
}

// Subscribe makes f run whenever a holder was released, a failed prepare
// gave up devices it had reserved, a prepare superseded other holders, or
// stale device numbers were noted for a holder: which devices another
// holder may take changed (the legacy endpoint advertises such devices
// healthy or not). f runs without the State's lock, in the goroutine that
// made the change: it must return at once. The returned function ends the
// subscription.
func (s *State) Subscribe(f func()) (cancel func()) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if s.listeners == nil {
		s.listeners = map[int]func(){}
	}
	id := s.nextID
	s.nextID++
	s.listeners[id] = f
	return func() {
		s.listenMu.Lock()
		defer s.listenMu.Unlock()
		delete(s.listeners, id)
	}
}

// notify runs the Subscribe listeners. Callers must not hold mu.
func (s *State) notify() {
	s.listenMu.Lock()
	fs := make([]func(), 0, len(s.listeners))
	for _, f := range s.listeners {
		fs = append(fs, f)
	}
	s.listenMu.Unlock()
	for _, f := range fs {
		f()
	}
}

// step runs Config.OnStep.
func (s *State) step(step Step, holder types.UID) {
	if s.cfg.OnStep != nil {
		s.cfg.OnStep(step, holder)
	}
}

// holderName names a holder for messages: "namespace/name (uid)" when its
// record is known. Caller holds mu.
func (s *State) holderName(uid types.UID) string {
	if rec := s.cp.Claims[string(uid)]; rec != nil && rec.Name != "" {
		return fmt.Sprintf("%s/%s (%s)", rec.Namespace, rec.Name, uid)
	}
	if op := s.ops[uid]; op != nil {
		return op.holder.String()
	}
	return string(uid)
}

// portLock returns the lock that serialises programming of a device, and
// the spec writes that must not pass a programming job (lockPorts).
// Caller holds mu.
func (s *State) portLock(device string) *sync.Mutex {
	l := s.ports[device]
	if l == nil {
		l = &sync.Mutex{}
		s.ports[device] = l
	}
	return l
}

// lockPorts takes the port locks of recs' devices, in the order of their
// names (runJob takes one), and returns their release. Callers must not
// hold mu or a port lock.
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
