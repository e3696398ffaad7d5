// Package state is the node's single record of which claim holds which FPGA
// port. Preparing a claim here checks that no other claim holds its
// devices, programs the requested accelerator functions (asynchronously, one
// job per port, so a slow region never blocks the kubelet past its
// deadline), writes the claim's CDI spec and records everything in a
// checkpoint that survives restarts and notices reboots. The DRA plugin and
// the legacy device-plugin endpoint share one State.
package state

import (
	"context"
	"errors"
	"fmt"
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
)

// Config wires a State.
type Config struct {
	// CheckpointPath is the checkpoint file (in the plugin data directory).
	CheckpointPath string
	// BootIDPath is /proc/sys/kernel/random/boot_id below the node root.
	BootIDPath string
	CDI        *cdi.Writer
	Repository *program.Repository
	Programmer program.Programmer
	// Programmable is false when the node forbids reprogramming.
	Programmable bool
	// PrepareWait bounds how long one Prepare waits for programming before
	// it reports "in progress" (the kubelet gives a call 45 s); 20 s when
	// zero.
	PrepareWait time.Duration
	Load        program.LoadOptions
	// OnProgrammed runs after every programming job (successful or not),
	// so the new AFU ID is re-read and republished and the outcome counted.
	OnProgrammed func(Programming)
}

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
	Device    string
	AFUID     string
	Bitstream string
	// SHA256 is the digest of the file that was loaded.
	SHA256   string
	Duration time.Duration
	Err      error
}

// Outcome is the result of one Prepare.
type Outcome struct {
	Devices []PreparedDevice
	// Programmed lists the programming jobs whose results this call
	// consumed (finished successfully or not).
	Programmed []Programming
}

var (
	// ErrInProgress: programming is still running; call Prepare again.
	ErrInProgress = errors.New("programming in progress")
	// ErrDeviceHeld: a device is prepared for another holder.
	ErrDeviceHeld = errors.New("device already prepared for another claim")
	// ErrNotProgrammable: the claim needs programming the node forbids.
	ErrNotProgrammable = errors.New("programming forbidden on this node")
	// ErrAFUNotLoaded: programming: Never, and the AFU is not there.
	ErrAFUNotLoaded = errors.New("accelerator function not loaded")
)

// job is one programming of one port for one holder.
type job struct {
	holder  types.UID
	afu     string
	started time.Time
	done    chan struct{}
	result  Programming
}

// State is safe for concurrent use. Prepares of distinct claims run in
// parallel; programming of one port is serialized.
type State struct {
	cfg    Config
	ctx    context.Context // outlives requests: programming jobs run in it
	bootID string

	mu      sync.Mutex
	cp      *Checkpoint
	cpFile  *CheckpointFile
	holders map[string]types.UID // device -> claim
	jobs    map[string]*job      // device -> latest job
	ports   map[string]*sync.Mutex
	// loadedSHA is the digest of the file this process last loaded into
	// each device's region; a claim that pins a digest is programmed
	// unless it matches.
	loadedSHA map[string]string

	// Group commit of the checkpoint: gen counts changes, savedGen the
	// change a completed save covered.
	saveMu        sync.Mutex
	gen, savedGen uint64
}

// New loads the checkpoint and returns a State. It does not touch CDI
// specs or devices: call Restore once devices are known. A corrupt
// checkpoint is reported through the returned warning (it was moved aside
// and what could be recovered is used); other errors are fatal.
func New(ctx context.Context, cfg Config) (s *State, warning error, err error) {
	if cfg.PrepareWait <= 0 {
		cfg.PrepareWait = 20 * time.Second
	}
	if cfg.CDI == nil {
		return nil, nil, errors.New("state: a CDI writer is required")
	}
	bootID, err := readBootID(cfg.BootIDPath)
	if err != nil {
		return nil, nil, err
	}
	cpFile, cp, err := OpenCheckpoint(cfg.CheckpointPath)
	if err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
		return nil, nil, err
	}
	warning = err
	s = &State{
		cfg:     cfg,
		ctx:     ctx,
		bootID:  bootID,
		cp:      cp,
		cpFile:  cpFile,
		holders: map[string]types.UID{},
		jobs:    map[string]*job{},
		ports:   map[string]*sync.Mutex{},

		loadedSHA: map[string]string{},
	}
	for uid, c := range cp.Claims {
		for _, d := range c.Devices {
			s.holders[d.Device] = types.UID(uid)
		}
	}
	return s, warning, nil
}

func readBootID(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read boot ID %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// BootID is the boot ID read at start.
func (s *State) BootID() string { return s.bootID }

// Restore makes the node match the checkpoint after a (re)start: the CDI
// spec of every completed claim is rewritten (the CDI directory is often a
// tmpfs that a reboot emptied), and specs of claims the checkpoint does not
// know are removed. Claims whose devices are gone are kept (the kubelet
// will unprepare them) and reported.
func (s *State) Restore(ctx context.Context, devs *discovery.Result) error {
	logger := klog.FromContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for uid, rec := range s.cp.Claims {
		if rec.BootID != s.bootID {
			logger.Info("Node rebooted since claim was prepared: programmed regions will be reprogrammed at the next prepare", "claim", klog.KRef(rec.Namespace, rec.Name), "uid", uid)
		}
		if rec.Phase != PhaseCompleted {
			continue
		}
		if _, err := s.writeSpec(types.UID(uid), rec.Devices, devs); err != nil {
			errs = append(errs, fmt.Errorf("restore CDI spec of claim %s/%s: %w", rec.Namespace, rec.Name, err))
		}
	}
	specs, err := s.cfg.CDI.ListClaimSpecs()
	if err != nil {
		errs = append(errs, err)
	}
	for _, uid := range specs {
		if _, ok := s.cp.Claims[uid]; !ok {
			logger.Info("Removing CDI spec of a claim the checkpoint does not hold", "uid", uid)
			if err := s.cfg.CDI.RemoveClaimSpec(uid); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// specDevices resolves a claim's device records to CDI devices.
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

// writeSpec writes the CDI spec for a claim's devices and returns the CDI
// device IDs in device order.
func (s *State) writeSpec(uid types.UID, recs []DeviceRecord, devs *discovery.Result) ([]string, error) {
	devices, err := specDevices(recs, devs)
	if err != nil {
		return nil, err
	}
	return s.cfg.CDI.WriteClaimSpec(string(uid), devices)
}

// Holders returns which holder holds each prepared device.
func (s *State) Holders() map[string]types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]types.UID, len(s.holders))
	for d, h := range s.holders {
		out[d] = h
	}
	return out
}

// Claim returns a copy of a claim's record.
func (s *State) Claim(uid types.UID) (ClaimRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.cp.Claims[string(uid)]
	if !ok {
		return ClaimRecord{}, false
	}
	c := *rec
	c.Devices = slices.Clone(rec.Devices)
	return c, true
}

// persist saves the checkpoint if it changed since the last save, sharing
// one write among concurrent callers (group commit). Callers must not hold
// mu.
func (s *State) persist() error {
	s.mu.Lock()
	want := s.gen
	s.mu.Unlock()
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if s.savedGen >= want {
		return nil
	}
	s.mu.Lock()
	snapshot, err := copyCheckpoint(s.cp)
	gen := s.gen
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.cpFile.Save(snapshot); err != nil {
		return err
	}
	s.savedGen = gen
	return nil
}

// changed notes a checkpoint change. Caller holds mu.
func (s *State) changed() { s.gen++ }
