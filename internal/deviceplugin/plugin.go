// Package deviceplugin is the FPGA driver's legacy endpoint for clusters
// (or nodes) without DRA: a kubelet device plugin (API v1beta1) that
// advertises the node's FPGAs under the Intel FPGA device plugin's resource
// names, so that pod specs written for that plugin keep working.
//
// It shares everything below the API with the DRA path: the same discovery
// (one discovery.Watcher feeds it), the same state.State (a port held by a
// DRA claim is refused here and the other way round), the same CDI writer
// and, for region mode, the same programming path, reached through the
// control socket by a createRuntime hook.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Defaults for Config.
const (
	DefaultDomain          = v1alpha1.DriverName
	DefaultCheckInterval   = 5 * time.Second
	DefaultRegisterTimeout = 10 * time.Second
)

// Config is everything the endpoint needs; cmd/fpga-dra-driver fills it
// from flags.
type Config struct {
	// Domain prefixes every resource name: DefaultDomain, or
	// "fpga.intel.com" to keep the Intel plugin's full names.
	Domain string
	Mode   Mode
	// Dir is the kubelet's device-plugin directory: kubelet.sock is there
	// and the endpoint puts one socket per resource there.
	Dir string
	// Scanner reads the node's sysfs/devfs.
	Scanner *discovery.Scanner
	// Events delivers hot-plug uevents; nil means none (full rescans).
	Events *discovery.UeventSource
	// RefreshInterval is the cheap re-read period (30 s when zero).
	RefreshInterval time.Duration
	// State is the node's shared state; every allocation holds its ports
	// there.
	State *state.State
	// CDI makes Allocate return the CDI device names of the allocated
	// ports (and HookDevice) besides the device nodes and environment.
	CDI bool
	// HookDevice is the fully qualified CDI device that carries the
	// programming hook (see WriteHookSpec). It is added to every region
	// mode allocation when CDI is on; empty for none.
	HookDevice string
	// CheckInterval is how often the sockets are checked even when no file
	// system event arrived, and how often a failed registration is retried
	// (DefaultCheckInterval when zero).
	CheckInterval time.Duration
	// RegisterTimeout bounds one registration call
	// (DefaultRegisterTimeout when zero).
	RegisterTimeout time.Duration
}

// Plugin serves the device-plugin API for every resource the node's
// devices make up, and keeps the set of resources in step with discovery.
type Plugin struct {
	cfg     Config
	ctx     context.Context
	cancel  context.CancelCauseFunc
	watcher *discovery.Watcher
	wg      sync.WaitGroup
	// kick asks the sync loop for a pass.
	kick chan struct{}
	// recheck asks for the devices' availability to be computed again:
	// the state released a hold or noted stale device numbers.
	recheck chan struct{}
	// advertising serialises advertise.
	advertising sync.Mutex

	mu      sync.Mutex
	devices *discovery.Result
	servers map[string]*resourceServer // by full resource name
	retired []*resourceServer          // to stop at the next sync

	// passes counts completed syncs; handled is the last directory event
	// the sync loop handled.
	passes  atomic.Uint64
	handled atomic.Pointer[handledEvent]
}

// Start discovers the node's devices and starts serving and registering
// their resources. The first discovery pass completes before Start
// returns; sockets and registrations follow asynchronously (the kubelet may
// not be up yet).
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	logger := klog.FromContext(ctx)
	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	if errs := validation.IsDNS1123Subdomain(cfg.Domain); len(errs) > 0 {
		return nil, fmt.Errorf("resource domain %q is not a DNS subdomain: %v", cfg.Domain, errs)
	}
	if _, err := ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		return nil, errors.New("device-plugin directory is empty: pass the kubelet's, /var/lib/kubelet/device-plugins")
	}
	if cfg.State == nil || cfg.Scanner == nil {
		return nil, errors.New("device plugin: a state and a scanner are required")
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = DefaultRegisterTimeout
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("create device-plugin directory: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	p := &Plugin{
		cfg:     cfg,
		ctx:     ctx,
		cancel:  cancel,
		kick:    make(chan struct{}, 1),
		recheck: make(chan struct{}, 1),
		servers: map[string]*resourceServer{},
	}
	// Holds released and stale numbers noted outside a discovery change
	// (the stale-hold releaser, a background spec rewrite) change which
	// devices are healthy: the kubelet never allocates a device last
	// reported unhealthy.
	unsubscribe := cfg.State.Subscribe(func() {
		select {
		case p.recheck <- struct{}{}:
		default:
		}
	})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.recheck:
				if res := p.Devices(); res != nil {
					p.advertise(ctx, res)
				}
			}
		}
	}()
	p.watcher = &discovery.Watcher{
		Scanner:  cfg.Scanner,
		Interval: cfg.RefreshInterval,
		Events:   cfg.Events,
		OnChange: p.onDevicesChanged,
	}
	watchDone, err := p.watcher.Start(ctx)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		<-watchDone
	}()
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("discover devices: %w", err)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.syncLoop(ctx)
	}()
	logger.Info("FPGA device-plugin endpoint started", "mode", cfg.Mode, "domain", cfg.Domain, "dir", cfg.Dir, "cdi", cfg.CDI, "resources", p.Resources())
	return p, nil
}

// Stop stops serving, removes the endpoint's sockets and waits for its
// goroutines. Holds in the state stay.
func (p *Plugin) Stop() {
	p.cancel(errors.New("device plugin stopped"))
	p.wg.Wait()
}

// Devices returns the latest discovery result.
func (p *Plugin) Devices() *discovery.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devices
}

// RefreshDevices asks for an immediate re-read of IDs and health, e.g.
// after a region was programmed.
func (p *Plugin) RefreshDevices() { p.watcher.Refresh() }

// Resources returns the full names of the advertised resources, sorted.
func (p *Plugin) Resources() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.servers))
	for _, r := range p.servers {
		names = append(names, r.fullName)
	}
	slices.Sort(names)
	return names
}

// Serves reports whether the endpoint serves resource fullName now: a
// legacy hold of a resource it does not serve (an earlier mode's) gets no
// Allocate that supersedes it, and is released once no container has its
// devices (ReleaseStaleHolds with Only: not Serves).
func (p *Plugin) Serves(fullName string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.servers[fullName]
	return ok
}

// Releasable reports whether the stale releaser may release a hold made
// for resource on devices (DRA device names) while the endpoint serves
// (StaleReleaser.Only): when the endpoint does not serve resource, no
// longer offers every one of devices under it (a port's AFU changed), or
// no longer offers them under the kubelet IDs the hold recorded (the
// cards were enumerated anew), no Allocate can be recording such a hold,
// nor supersede it, nor hand its IDs out again for its ports.
func (p *Plugin) Releasable(resource string, devices []string) bool {
	p.mu.Lock()
	r := p.servers[resource]
	p.mu.Unlock()
	if r == nil {
		return true
	}
	// The hold's record: the one holder of its first device.
	var rec state.ClaimRecord
	if len(devices) > 0 {
		rec, _ = p.cfg.State.Claim(p.cfg.State.Holders()[devices[0]])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	offers := func(d *device, name string) bool {
		return slices.ContainsFunc(d.ports, func(p *discovery.Port) bool { return p.DeviceName() == name })
	}
	for _, name := range devices {
		if !slices.ContainsFunc(r.devices, func(d *device) bool { return offers(d, name) }) {
			return true
		}
	}
	if rec.Name != resource {
		return false
	}
	for _, d := range rec.Devices {
		for _, id := range d.Requests {
			if dev := r.byID[id]; dev == nil || !offers(dev, d.Device) {
				return true
			}
		}
	}
	return false
}

func (p *Plugin) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Plugin) onDevicesChanged(ctx context.Context, res *discovery.Result) {
	logger := klog.FromContext(ctx)
	res.Report(logger, p.cfg.Scanner.Root)
	p.advertise(ctx, res)
	if err := p.cfg.State.RefreshSpecs(res); err != nil {
		logger.Error(err, "Rewriting CDI specs after the devices changed failed")
	}
	// The rewrite notes stale device numbers (renumbered cards): the
	// ports they reach now are no longer free.
	p.advertise(ctx, res)
	p.poke()
}

// advertise sets the resources and their devices from res and the holds
// in the state now.
func (p *Plugin) advertise(ctx context.Context, res *discovery.Result) {
	logger := klog.FromContext(ctx)
	p.advertising.Lock()
	defer p.advertising.Unlock()
	if cur := p.Devices(); cur != nil && cur != res && res.Started.Before(cur.Started) {
		return // a recheck of a result the watcher has replaced since
	}
	inv, errs := inventory(res, p.cfg.Mode, p.cfg.Domain, currentHolds(p.cfg.State, res))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.devices != res {
		for _, err := range errs {
			logger.Error(err, "FPGA device is not advertised")
		}
	}
	p.devices = res
	for name, rsrc := range inv {
		r := p.servers[name]
		if r == nil {
			r = newResourceServer(p, name)
			p.servers[name] = r
			logger.Info("Advertising resource", "resource", r.fullName, "devices", len(rsrc.devices), "socket", r.endpoint)
		}
		r.setDevices(rsrc.devices)
	}
	for name, r := range p.servers {
		if _, ok := inv[name]; !ok {
			r.setDevices(nil)
			close(r.removed)
			delete(p.servers, name)
			p.retired = append(p.retired, r)
		}
	}
}
