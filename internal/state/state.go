// Package state is the node's single record of which holder (a
// ResourceClaim, or a legacy device-plugin allocation) holds which FPGA
// device: every entry point goes through one State, so a device held for
// one of them is refused to the others.
//
// Every change follows the same three steps:
//
//   - decide (prepare.go, decide.go): under one lock, check that the
//     devices are free, choose what each needs (the pure policy in
//     decideDevice) and reserve them for the holder in the same critical
//     section;
//   - run (run.go, job.go): program regions, one job per device, with no
//     lock held, and write the CDI spec;
//   - commit (commit.go): the only place the checkpoint changes; the
//     checkpoint package makes it durable, concurrent commits sharing a
//     flush.
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

	"github.com/fpga-dra/fpga-dra-driver/internal/checkpoint"
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

// State is safe for concurrent use. Operations of distinct holders run in
// parallel; the operations of one holder are one at a time (a second
// prepare of the same claim joins the first and gets its answer);
// programming of one region is serialised.
type State struct {
	cfg    Config
	ctx    context.Context // outlives requests: operations and jobs run in it
	bootID string

	mu   sync.Mutex
	book book
	// holds says who holds each device: reserved by an operation in
	// flight, prepared (a record in the checkpoint) or being released.
	// Every device of a record is held by that record's holder.
	holds   map[string]types.UID
	ops     operations
	regions regions
	specs   specs
	// draining: the State takes no more work (Drain).
	draining  bool
	listeners listeners
	hooks     testHooks
}

// operations are what runs for each holder.
type operations struct {
	// active is the operation in flight for a holder, or one that
	// finished and whose outcome no caller has read yet.
	active map[types.UID]*op
	// releasing marks holders an Unprepare is releasing.
	releasing map[types.UID]bool
	// versions is the Version of each holder with a record or an
	// operation; last is the latest one handed out.
	versions map[types.UID]Version
	last     Version
}

// regions are the programmable regions, by device name.
type regions struct {
	// jobs is the programming job in flight for a device.
	jobs map[string]*job
	// locks serialise the programming of a device (portLock).
	locks map[string]*sync.Mutex
	// loaded is what this process last loaded into each device's region:
	// a claim that pins a digest or names an OCI reference is programmed
	// unless it matches.
	loaded map[string]loadedFile
}

// specs is what the CDI specs were written from.
type specs struct {
	// devs is the newest discovery result RefreshSpecs or Restore saw,
	// nodes nodesIn(devs).
	devs  *discovery.Result
	nodes map[string]string
	// written is, for each holder whose CDI spec this process wrote, the
	// device nodes it was written from (nodesOf). A completed holder
	// whose written differs from nodes has a stale spec.
	written map[types.UID]string
	// vanished are, by holder, nodes its spec gave that no port had
	// when the spec was rewritten without them (noteGone).
	vanished map[types.UID][]string
}

// testHooks are called at points tests wait for; all nil in the daemon.
type testHooks struct {
	// onCompleted is called as completed begins, onAwaitJob as a prepare
	// starts waiting for a programming job of the holder's outside its
	// operation (awaitHolderJobs), and onFlush as a flush takes the
	// checkpoint it writes.
	onCompleted, onAwaitJob func(types.UID)
	onFlush                 func()
}

// New loads the checkpoint and returns a State. It does not touch CDI
// specs or devices: call Restore once devices are known. A damaged
// checkpoint is no error: New returns it as warning (wrapping
// checkpoint.ErrCorrupt) and Restore recovers what the node still shows.
// A checkpoint written by a newer driver fails with checkpoint.ErrNewer.
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
	store, cp, err := checkpoint.Open(cfg.CheckpointPath)
	if err != nil && !errors.Is(err, checkpoint.ErrCorrupt) {
		return nil, nil, err
	}
	warning = err
	s = &State{
		cfg:     cfg,
		ctx:     ctx,
		bootID:  bootID,
		book:    book{store: store, cp: cp},
		holds:   map[string]types.UID{},
		ops:     operations{active: map[types.UID]*op{}, releasing: map[types.UID]bool{}, versions: map[types.UID]Version{}},
		regions: regions{jobs: map[string]*job{}, locks: map[string]*sync.Mutex{}, loaded: map[string]loadedFile{}},
		specs:   specs{written: map[types.UID]string{}, vanished: map[types.UID][]string{}},
	}
	if warning != nil {
		s.book.damaged = warning.Error()
	}
	klog.FromContext(ctx).Info("Checkpoint opened", "path", cfg.CheckpointPath, "claims", len(cp.Claims))
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
	out := make([]ClaimRecord, 0, len(s.book.cp.Claims))
	for _, rec := range s.book.cp.Claims {
		out = append(out, *rec.Clone())
	}
	slices.SortFunc(out, func(a, b ClaimRecord) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// Claim returns a copy of a holder's record.
func (s *State) Claim(uid types.UID) (ClaimRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.book.cp.Claims[string(uid)]
	if !ok {
		return ClaimRecord{}, false
	}
	return *rec.Clone(), true
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
	if rec := s.book.cp.Claims[string(uid)]; rec != nil && rec.Name != "" {
		return fmt.Sprintf("%s/%s (%s)", rec.Namespace, rec.Name, uid)
	}
	if op := s.ops.active[uid]; op != nil {
		return op.holder.String()
	}
	return string(uid)
}
