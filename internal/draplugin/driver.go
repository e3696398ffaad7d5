// Package draplugin is the node side of the FPGA DRA driver: it publishes
// the node's FPGA ports as ResourceSlices through the kubeletplugin helper,
// prepares and unprepares ResourceClaims for the kubelet, and streams device
// health to it.
package draplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Config is everything the driver needs; cmd/fpga-dra-driver fills it from
// flags.
type Config struct {
	DriverName string
	NodeName   string
	KubeClient kubernetes.Interface
	// RegistrarDir and PluginDataDir are the kubelet's plugin registry
	// directory and this driver's data directory (sockets, checkpoint).
	RegistrarDir  string
	PluginDataDir string
	// Scanner reads the node's sysfs/devfs.
	Scanner *discovery.Scanner
	// Events delivers hot-plug uevents; nil means none (full rescans).
	Events *discovery.UeventSource
	// RefreshInterval is the cheap re-read period (30 s when zero).
	RefreshInterval time.Duration
	// Programmable is false when this node forbids reprogramming.
	Programmable bool
	// UnhealthyEffect is the effect of an unhealthy device's taint
	// (NoSchedule when empty).
	UnhealthyEffect resourceapi.DeviceTaintEffect
	// Claims prepares and unprepares claims; nil refuses every claim.
	Claims ClaimPreparer
	// Metrics records device health; nil records nothing.
	Metrics *drivermetrics.Metrics
	// HealthResend is how often health is re-sent to the kubelet even when
	// nothing changed (10 s when zero; the kubelet's window is 30 s).
	HealthResend time.Duration
	// SliceSyncDelay is how long after a change of this node's
	// ResourceSlices (someone deleted or edited one) they are put back
	// (DefaultSliceSyncDelay when zero).
	SliceSyncDelay time.Duration
	// Binder, when set, programs claims before their pods are bound: every
	// device carries the binding condition <driver>/programmed and the
	// failure condition <driver>/programming-failed. When the API server
	// drops those fields (the feature is off) the driver says so, stops
	// the Binder and publishes without them: claims are then programmed at
	// prepare, as without a Binder.
	Binder *Binder
	// QuarantineTime is how long a device whose programming failed before
	// binding stays out of new allocations (DefaultQuarantineTime when
	// zero).
	QuarantineTime time.Duration
	// PodUID, when set, lets a second instance of the driver (the next
	// version's pod during a rolling update) serve the kubelet beside this
	// one (kubeletplugin.RollingUpdate).
	PodUID types.UID
	// DeviceMetadata gives every container a file with its devices'
	// attributes (KEP-5304); its CDI specs go to CDIDir.
	DeviceMetadata bool
	CDIDir         string
	// Standby starts the driver registered with the kubelet and reading
	// the node, but publishing nothing and holding the kubelet's calls
	// until Activate (with Claims and Binder): the instance of a rolling
	// update that waits for the previous one to stop and release the
	// node's state.
	Standby bool
}

// DefaultQuarantineTime is how long a device whose programming failed
// before binding is kept out of new allocations: long enough for the
// scheduler to allocate the claim again elsewhere.
const DefaultQuarantineTime = 2 * time.Minute

// DefaultSliceSyncDelay is how soon a node's ResourceSlices are put back
// after someone else changed them. The library's default, 30 s, suits a
// controller of many pools whose informer may lag; a node daemon watches
// only its own pool (one or a few slices), so its cache is current within
// milliseconds and a deleted slice is back within about a second.
const DefaultSliceSyncDelay = time.Second

// ClaimPreparer does the node-side work for claims allocated to this node.
type ClaimPreparer interface {
	Prepare(ctx context.Context, claims []*resourceapi.ResourceClaim, devices *discovery.Result) map[types.UID]kubeletplugin.PrepareResult
	Unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) map[types.UID]error
	// RefreshSpecs rewrites the CDI specs of prepared claims that were
	// not written from the device nodes their ports have in devices
	// (state.State.RefreshSpecs).
	RefreshSpecs(devices *discovery.Result) error
	// RenumberedDevices are the devices of devices to taint because a
	// running container may reach them by a device number it was given
	// before the cards were enumerated anew (state.State.RenumberedDevices),
	// each with the claim concerned.
	RenumberedDevices(devices *discovery.Result) map[string]string
}

// Driver implements kubeletplugin.DRAPlugin.
type Driver struct {
	cfg     Config
	helper  *kubeletplugin.Helper
	watcher *discovery.Watcher
	// slices publishes the node's ResourceSlices; started by the first
	// publish, guarded by slicesMu.
	slicesMu sync.Mutex
	slices   *resourceslice.Controller
	// binding says devices carry binding conditions and the Binder runs;
	// stopBinder stops it.
	binding    atomic.Bool
	stopBinder context.CancelFunc
	// quarantined are the devices kept out of allocations, with why and
	// until when; guarded by mu.
	quarantined map[string]quarantine
	// renumbered says the last publish tainted devices for a stale
	// device number: an unprepare may then end the taint (publish).
	renumbered atomic.Bool

	mu      sync.Mutex
	devices *discovery.Result
	// changed is closed and replaced whenever devices changes.
	changed chan struct{}
	// discovered is closed once devices is set: the kubelet may call
	// the plugin as soon as its sockets exist, before the first
	// discovery pass is done.
	discovered     chan struct{}
	discoveredOnce sync.Once
	// published holds the name of every device published since Start;
	// one no longer discovered is reported unhealthy (removed) to the
	// kubelet, so that pods holding it see why.
	published map[string]bool

	// active is closed by Activate; claims and binder are set before.
	active chan struct{}
	claims ClaimPreparer
	binder *Binder
	ctx    context.Context

	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	// unregistered and stopped make Unregister and Stop run once.
	unregistered, stopped sync.Once
}

var _ kubeletplugin.DRAPlugin = &Driver{}

// Start discovers the node's devices, registers with the kubelet and starts
// publishing. The first discovery pass completes before Start returns.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	logger := klog.FromContext(ctx)
	if cfg.HealthResend <= 0 {
		cfg.HealthResend = 10 * time.Second
	}
	if cfg.SliceSyncDelay <= 0 {
		cfg.SliceSyncDelay = DefaultSliceSyncDelay
	}
	if cfg.QuarantineTime <= 0 {
		cfg.QuarantineTime = DefaultQuarantineTime
	}
	if err := checkSocketPaths(cfg); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	d := &Driver{cfg: cfg, changed: make(chan struct{}), discovered: make(chan struct{}), published: map[string]bool{}, cancel: cancel, quarantined: map[string]quarantine{}, active: make(chan struct{}), ctx: ctx}
	d.watcher = &discovery.Watcher{
		Scanner:  cfg.Scanner,
		Interval: cfg.RefreshInterval,
		Events:   cfg.Events,
		OnChange: d.onDevicesChanged,
	}

	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(cfg.DriverName),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.KubeClient(cfg.KubeClient),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir),
		// Claims on distinct devices prepare in parallel; the claim
		// preparer locks per device, and between instances (rolling
		// update) the State's lock serialises.
		kubeletplugin.Serialize(false),
	}
	if cfg.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(cfg.PodUID))
	}
	if cfg.DeviceMetadata {
		opts = append(opts,
			kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
			kubeletplugin.MetadataFileOps(kubeletplugin.MetadataFileOperations{WriteFile: writeMetadataFile}))
		if cfg.CDIDir != "" {
			opts = append(opts, kubeletplugin.CDIDirectory(cfg.CDIDir))
		}
	}
	helper, err := kubeletplugin.Start(ctx, d, opts...)
	if err != nil {
		cancel(err)
		return nil, fmt.Errorf("start kubelet plugin: %w", err)
	}
	d.helper = helper

	watchDone, err := d.watcher.Start(ctx)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		<-watchDone
	}()
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("discover devices: %w", err)
	}
	logger.Info("FPGA DRA driver started", "standby", cfg.Standby, "driver", cfg.DriverName, "node", cfg.NodeName, "kernelDrivers", d.Devices().Drivers, "devices", len(d.Devices().Ports()))
	if !cfg.Standby {
		d.Activate(cfg.Claims, cfg.Binder)
	}
	return d, nil
}

// Activate makes a driver started in Standby serve: the kubelet's calls
// held so far go to claims, binder (when set) starts programming claims
// before binding, and the node's devices are published. A driver started
// without Standby is active from Start. Activate is called once.
func (d *Driver) Activate(claims ClaimPreparer, binder *Binder) {
	ctx := d.ctx
	logger := klog.FromContext(ctx)
	if binder != nil {
		switch stored, err := bindingConditionsStored(ctx, d.cfg.KubeClient, d.cfg.DriverName, d.cfg.NodeName); {
		case err != nil:
			logger.Error(err, "Cannot tell whether the API server keeps binding conditions; publishing them, and falling back if it drops them")
		case !stored:
			logger.Info("The API server drops binding conditions (feature DRADeviceBindingConditions off): claims are programmed at prepare instead of before binding")
			binder = nil
		}
	}
	d.claims, d.binder = claims, binder
	d.binding.Store(binder != nil)
	if binder != nil {
		bctx, stop := context.WithCancel(ctx)
		d.stopBinder = stop
		d.wg.Go(func() {
			if err := binder.Run(bctx); err != nil {
				klog.FromContext(ctx).Error(err, "Programming before binding stopped")
			}
		})
		d.wg.Go(func() { d.expireQuarantines(ctx) })
	}
	close(d.active)
	// After close: a change from now on is onDevicesChanged's; one before
	// is in Devices(). RefreshSpecs ignores the older of racing results.
	select {
	case <-d.discovered:
		if claims != nil {
			if err := claims.RefreshSpecs(d.Devices()); err != nil {
				logger.Error(err, "Rewriting CDI specs failed")
			}
		}
	default:
	}
	logger.Info("FPGA DRA driver active", "bindingConditions", binder != nil)
	d.publish(ctx)
}

// isActive reports whether Activate was called.
func (d *Driver) isActive() bool {
	select {
	case <-d.active:
		return true
	default:
		return false
	}
}

// activeClaims waits until the driver is active and returns its claim
// preparer (nil: claims are refused).
func (d *Driver) activeClaims(ctx context.Context) (ClaimPreparer, error) {
	select {
	case <-d.active:
		return d.claims, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the previous instance of this driver to stop and release the node's state: %w", context.Cause(ctx))
	}
}

// Unregister stops serving the kubelet (its calls and the health stream)
// and programming claims before binding. Discovery and the published
// ResourceSlices go on until Stop: a stopping daemon keeps them current
// (a deleted slice put back, health changes published) while it waits for
// programming in flight. Call it after Activate (or instead of it).
func (d *Driver) Unregister() {
	d.unregistered.Do(func() {
		if d.helper != nil {
			d.helper.Stop()
		}
		if d.stopBinder != nil {
			d.stopBinder()
		}
	})
}

// Stop unregisters from the kubelet and stops publishing. Published slices
// stay (the kubelet removes them when the plugin is gone for good). Later
// calls wait for the first.
func (d *Driver) Stop() {
	d.stopped.Do(func() {
		d.Unregister()
		d.cancel(errors.New("driver stopped"))
		d.wg.Wait()
		d.slicesMu.Lock()
		defer d.slicesMu.Unlock()
		if d.slices != nil {
			d.slices.Stop()
		}
	})
}

// Helper exposes the kubeletplugin helper (registration status, tests).
func (d *Driver) Helper() *kubeletplugin.Helper { return d.helper }

// Devices returns the latest discovery result; nil only while Start runs
// its first discovery pass.
func (d *Driver) Devices() *discovery.Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.devices
}

// DevicesChanged returns a channel closed at the next change of Devices.
func (d *Driver) DevicesChanged() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// RefreshDevices asks for an immediate re-read of IDs and health, e.g.
// after a port was programmed; the new AFU ID is then republished.
func (d *Driver) RefreshDevices() { d.watcher.Refresh() }

// Republish publishes the ResourceSlices again, in the background: the
// State recorded stale device numbers outside a discovery change.
func (d *Driver) Republish() { go d.publish(d.ctx) }

func (d *Driver) onDevicesChanged(ctx context.Context, res *discovery.Result) {
	logger := klog.FromContext(ctx)
	res.Report(logger, d.cfg.Scanner.Root)
	healthy := 0
	for _, p := range res.Ports() {
		if p.Health.Healthy {
			healthy++
		}
	}
	d.cfg.Metrics.SetDevices(healthy, len(res.Ports())-healthy)
	d.mu.Lock()
	d.devices = res
	for _, p := range res.Ports() {
		d.published[p.DeviceName()] = true
	}
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	d.discoveredOnce.Do(func() { close(d.discovered) })
	if d.isActive() && d.claims != nil {
		// Cards enumerated anew: a prepared claim's CDI spec must name
		// its ports' nodes as they are now before a container restarts.
		if err := d.claims.RefreshSpecs(res); err != nil {
			logger.Error(err, "Rewriting CDI specs after the devices changed failed")
		}
	}
	d.publish(ctx)
}

// discoveredDevices returns the latest discovery result, waiting for the
// first discovery pass when a kubelet call arrives before it is done.
func (d *Driver) discoveredDevices(ctx context.Context) (*discovery.Result, error) {
	select {
	case <-d.discovered:
		return d.Devices(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the first discovery of this node's FPGAs: %w", context.Cause(ctx))
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	if len(claims) == 0 {
		return nil, nil // a liveness check; answered in standby too
	}
	preparer, err := d.activeClaims(ctx)
	if err != nil {
		return nil, err
	}
	if preparer == nil {
		result := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
		for _, c := range claims {
			result[c.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: this node's FPGA driver is not configured to prepare claims", c.Namespace, c.Name)}
		}
		return result, nil
	}
	devices, err := d.discoveredDevices(ctx)
	if err != nil {
		return nil, err
	}
	return preparer.Prepare(ctx, claims, devices), nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	preparer, err := d.activeClaims(ctx)
	if err != nil {
		return nil, err
	}
	if preparer == nil {
		result := make(map[types.UID]error, len(claims))
		for _, c := range claims {
			result[c.UID] = nil
		}
		return result, nil
	}
	result := preparer.Unprepare(ctx, claims)
	if d.renumbered.Load() {
		// A released claim takes its stale-number taints along.
		d.publish(d.ctx)
	}
	return result, nil
}

// HandleError implements kubeletplugin.DRAPlugin. Background errors (slice
// publishing) are logged; the ResourceSlice controller retries them with
// backoff. A fatal error stops the driver so that it restarts cleanly.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("fatal background error: %s: %w", msg, err))
	}
}

// writeMetadataFile replaces a device metadata file, or the CDI spec that
// mounts it, atomically but without flushing it. Only a crash of the
// node's kernel (or its power) loses an unflushed file, or leaves it
// empty; the node then restarts, no pod sandbox is ready, and the kubelet
// calls NodePrepareResources for a pod's claims before it creates the
// sandbox (it does not checkpoint which claims are prepared), so the
// helper writes both files afresh before any container can mount them.
// The one flush a prepare waits for thus stays the checkpoint's; the
// helper's default would add two file and two directory flushes per
// request.
func writeMetadataFile(name string, data []byte, perm os.FileMode) error {
	return atomicfile.Write(name, data, atomicfile.Options{Perm: perm, NoSync: true})
}
