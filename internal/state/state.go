// Package state is the node's single record of which holder (a
// ResourceClaim, or a legacy device-plugin allocation) holds which FPGA
// device: every entry point goes through one State, so a device held for
// one of them is refused to the others.
//
// Every change is decided under one lock (prepare.go, decide.go: check the
// devices are free, decide what each needs, reserve them), run without it
// (run.go, job.go: program, write the CDI spec) and committed (commit.go:
// the only place the checkpoint changes). A prepare answers only after its
// commit is on disk; an unprepare frees a device only after every
// programming job for its holder has ended.
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
	// Registry fetches bitstreams a config names by OCI reference; nil
	// refuses such configs, saying RegistryUnavailable.
	Registry            *oci.Puller
	RegistryUnavailable string
	Programmer          program.Programmer
	// Programmable is false when the node forbids reprogramming.
	Programmable bool
	// PrepareWait bounds how long one Prepare waits for programming before
	// it reports ErrInProgress; ReleaseWait how long one Unprepare waits
	// for the holder's jobs before it reports ErrReleasing. Zero means the
	// default.
	PrepareWait time.Duration
	ReleaseWait time.Duration
	Load        program.LoadOptions
	// OnProgrammed runs after every programming job, with the region
	// locked: it must not wait for the State.
	OnProgrammed func(Programming)
	// OnStep, when set, runs at each Step, with the holder concerned (for
	// tracing and fault injection).
	OnStep func(step Step, holder types.UID)
	// OnRenumbered, when set, runs without the State's lock once
	// RenumberedDevices changed.
	OnRenumbered func()
}

// Step names a point in a prepare, a programming or an unprepare where
// Config.OnStep runs.
type Step string

const (
	StepReserved    Step = "reserved"     // devices reserved in memory
	StepStarted     Step = "started"      // PhaseStarted record on disk
	StepProgramming Step = "programming"  // a region is about to be programmed
	StepProgrammed  Step = "programmed"   // the programmer returned
	StepSpecWritten Step = "spec-written" // CDI spec written, record not yet
	StepPrepared    Step = "prepared"     // completed record on disk
	StepSpecRemoved Step = "spec-removed" // CDI spec removed, record not yet
	StepReleased    Step = "released"     // record removed on disk
	StepRenumbered  Step = "renumbered"   // stale nodes added to the record
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
	// holds says who holds each device (reserved, prepared or being
	// released); every device of a record is held by its holder.
	holds     map[string]types.UID
	ops       operations
	regions   regions
	specs     specs
	draining  bool // Drain
	listeners listeners
	hooks     testHooks
}

// operations are what runs for each holder.
type operations struct {
	// active is the operation in flight for a holder, or a finished one
	// whose outcome no caller has read yet.
	active    map[types.UID]*op
	releasing map[types.UID]bool // holders an Unprepare releases
	// versions is the Version of each holder with a record or an
	// operation; last is the latest one handed out.
	versions map[types.UID]Version
	last     Version
}

// regions are the programmable regions, by device name.
type regions struct {
	jobs   map[string]*job        // the programming job in flight
	locks  map[string]*sync.Mutex // portLock
	loaded map[string]loadedFile  // what this process last loaded
}

// specs is what the CDI specs were written from.
type specs struct {
	// devs is the newest discovery result seen, nodes
	// renumber.ByDevice(devs).
	devs  *discovery.Result
	nodes map[string]string
	// written is, by holder, the nodes its CDI spec was written from
	// (renumber.Of): one that differs from nodes is stale.
	written map[types.UID]string
	// vanished are, by holder, nodes its spec gave that no port had
	// (noteGone).
	vanished map[types.UID][]string
}

// testHooks are called at points tests wait for; all nil in the daemon.
type testHooks struct {
	// onCompleted is called as completed begins, onAwaitJob as
	// awaitHolderJobs waits, onFlush as a flush takes the checkpoint.
	onCompleted, onAwaitJob func(types.UID)
	onFlush                 func()
}

// New loads the checkpoint and returns a State; call Restore once devices
// are known. A damaged checkpoint is returned as warning (wrapping
// checkpoint.ErrCorrupt), one of a newer driver fails with
// checkpoint.ErrNewer.
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

// holderName names a holder for messages. Caller holds mu.
func (s *State) holderName(uid types.UID) string {
	if rec := s.book.cp.Claims[string(uid)]; rec != nil && rec.Name != "" {
		return fmt.Sprintf("%s/%s (%s)", rec.Namespace, rec.Name, uid)
	}
	if op := s.ops.active[uid]; op != nil {
		return op.holder.String()
	}
	return string(uid)
}
