package draplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Claims prepares ResourceClaims on the shared node State: it turns a
// claim's allocation into device requests with their FpgaConfig, prepares
// the claims of one call in parallel, and records events on the claims.
type Claims struct {
	DriverName string
	// PoolName is the node's pool (the node name).
	PoolName string
	State    *state.State
	// Recorder records events on claims; nil records none.
	Recorder events.EventRecorder
	// Metrics counts prepares and unprepares; nil counts nothing.
	Metrics *drivermetrics.Metrics
	// Client, when set, writes each prepared device's status in its
	// claim (the Ready condition and DeviceData) once the kubelet has
	// its answer.
	Client kubernetes.Interface
	// Slices are the published devices' options: a prepared device's
	// metadata for the container carries its published attributes.
	Slices deviceslice.Options

	// ready writes the prepared devices' status.
	ready readyWrites
}

var _ ClaimPreparer = &Claims{}

// Prepare implements ClaimPreparer. Claims are independent: each gets its
// own result, and they are prepared concurrently.
func (c *Claims) Prepare(ctx context.Context, claims []*resourceapi.ResourceClaim, devs *discovery.Result) map[types.UID]kubeletplugin.PrepareResult {
	return concurrently(claims, func(claim *resourceapi.ResourceClaim) (types.UID, kubeletplugin.PrepareResult) {
		return claim.UID, c.prepareClaim(ctx, claim, devs)
	})
}

// concurrently runs f for every claim at once and collects its results by
// the UID f returns.
func concurrently[C, R any](claims []C, f func(C) (types.UID, R)) map[types.UID]R {
	results := make(map[types.UID]R, len(claims))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, claim := range claims {
		wg.Go(func() {
			uid, r := f(claim)
			mu.Lock()
			results[uid] = r
			mu.Unlock()
		})
	}
	wg.Wait()
	return results
}

func (c *Claims) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim, devs *discovery.Result) kubeletplugin.PrepareResult {
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "claim", klog.KObj(claim))
	ctx = klog.NewContext(ctx, logger)
	done := c.Metrics.StartPrepare()
	fail := func(err error) kubeletplugin.PrepareResult {
		if errors.Is(err, state.ErrInProgress) {
			done(drivermetrics.OutcomeInProgress)
		} else {
			done(drivermetrics.OutcomeError)
		}
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
	}
	reqs, err := c.requests(claim)
	if err != nil {
		c.event(claim, v1.EventTypeWarning, "InvalidConfig", "Prepare", "%v", err)
		return fail(err)
	}
	h := state.Holder{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	out, err := c.State.Prepare(ctx, h, reqs, devs)
	for _, p := range out.Programmed {
		if p.Err != nil {
			c.event(claim, v1.EventTypeWarning, "ProgrammingFailed", "Program", "Loading AFU %s into %s failed after %s: %v", p.AFUID, p.Device, p.Duration.Round(1e6), p.Err)
		} else {
			c.event(claim, v1.EventTypeNormal, "Programmed", "Program", "Loaded AFU %s into %s from %s in %s", p.AFUID, p.Device, p.Bitstream, p.Duration.Round(1e6))
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, state.ErrInProgress):
			logger.V(2).Info("Programming still running", "err", err)
		case errors.Is(err, state.ErrDraining):
			// A stopping daemon: the kubelet's retry reaches the next
			// one. Nothing failed that the claim's owner should see.
			logger.V(2).Info("Not prepared: the driver is stopping", "err", err)
		case len(out.Programmed) == 0:
			c.event(claim, v1.EventTypeWarning, "PrepareFailed", "Prepare", "%v", err)
		}
		return fail(err)
	}
	done(drivermetrics.OutcomeSuccess)
	result := c.result(out, devs)
	c.reportReady(ctx, claim, out, devs)
	return *result
}

// result is the kubelet's answer for the prepared devices of out.
func (c *Claims) result(out state.Outcome, devs *discovery.Result) *kubeletplugin.PrepareResult {
	result := &kubeletplugin.PrepareResult{}
	for _, d := range out.Devices {
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests:     d.Requests,
			PoolName:     c.PoolName,
			DeviceName:   d.Device,
			CDIDeviceIDs: d.CDIDeviceIDs,
			Metadata:     c.metadata(d, devs),
		})
	}
	return result
}

// metadata is what a container finds about a prepared device in its
// metadata file (KEP-5304): the device's published attributes, with the
// AFU the claim loaded (before a refresh has read it back), and its nodes.
func (c *Claims) metadata(d state.PreparedDevice, devs *discovery.Result) *kubeletplugin.DeviceMetadata {
	card, port, ok := devs.FindPort(d.Device)
	if !ok {
		return nil
	}
	o := c.Slices
	o.DriverName = c.DriverName
	attrs := map[string]resourceapi.DeviceAttribute{}
	for name, a := range deviceslice.Device(card, port, o).Attributes {
		attrs[strings.TrimPrefix(string(name), c.DriverName+"/")] = a
	}
	if afu := d.AFUID; afu != "" {
		attrs["afuID"] = resourceapi.DeviceAttribute{StringValue: &afu}
	}
	var nodes []string
	for _, n := range port.Nodes() {
		nodes = append(nodes, n.Path)
	}
	if joined := strings.Join(nodes, ","); len(joined) <= 64 {
		attrs["deviceNodes"] = resourceapi.DeviceAttribute{StringValue: &joined}
	}
	return &kubeletplugin.DeviceMetadata{Attributes: attrs}
}

// requests lists the claim's devices of this driver and pool with the
// FpgaConfig that applies to each: DeviceClass configs first, then claim
// configs, later ones overriding earlier ones; a config scoped to requests
// applies only to those (a subrequest "r/s" also matches "r"); opaque
// configs of other drivers are ignored.
func (c *Claims) requests(claim *resourceapi.ResourceClaim) ([]state.DeviceRequest, error) {
	if claim.Status.Allocation == nil {
		return nil, errors.New("the claim is not allocated")
	}
	alloc := claim.Status.Allocation.Devices
	var ordered []resourceapi.DeviceAllocationConfiguration
	for _, src := range []resourceapi.AllocationConfigSource{resourceapi.AllocationConfigSourceClass, resourceapi.AllocationConfigSourceClaim} {
		for _, cfg := range alloc.Config {
			if cfg.Source == src && cfg.Opaque != nil && cfg.Opaque.Driver == c.DriverName {
				ordered = append(ordered, cfg)
			}
		}
	}
	decoded := make([]*v1alpha1.FpgaConfig, len(ordered))
	for i, cfg := range ordered {
		fc, err := v1alpha1.DecodeAndValidate(cfg.Opaque.Parameters.Raw)
		if err != nil {
			where := "claim"
			if cfg.Source == resourceapi.AllocationConfigSourceClass {
				where = "device class"
			}
			return nil, fmt.Errorf("opaque config #%d for driver %s from the %s is invalid: %w", i, c.DriverName, where, err)
		}
		decoded[i] = fc
	}
	var reqs []state.DeviceRequest
	for _, r := range alloc.Results {
		if r.Driver != c.DriverName || r.Pool != c.PoolName {
			continue
		}
		dr := state.DeviceRequest{Device: r.Device, Requests: []string{r.Request}}
		parent, _, _ := strings.Cut(r.Request, "/")
		for i, cfg := range ordered {
			if len(cfg.Requests) == 0 || slices.Contains(cfg.Requests, r.Request) || slices.Contains(cfg.Requests, parent) {
				dr.Config = decoded[i]
			}
		}
		reqs = append(reqs, dr)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("no device of driver %s in pool %s is allocated to the claim", c.DriverName, c.PoolName)
	}
	return reqs, nil
}

// RefreshSpecs implements ClaimPreparer: the CDI specs of prepared claims
// not written from their ports' nodes in devs are rewritten
// (state.State.RefreshSpecs).
func (c *Claims) RefreshSpecs(devs *discovery.Result) error { return c.State.RefreshSpecs(devs) }

// RenumberedDevices implements ClaimPreparer.
func (c *Claims) RenumberedDevices(devs *discovery.Result) map[string]string {
	out := map[string]string{}
	for dev, h := range c.State.RenumberedDevices(devs) {
		out[dev] = h.String()
	}
	return out
}

// Unprepare implements ClaimPreparer. Claims are independent: they are
// released concurrently, each with its own result.
func (c *Claims) Unprepare(ctx context.Context, claims []kubeletplugin.NamespacedObject) map[types.UID]error {
	return concurrently(claims, func(claim kubeletplugin.NamespacedObject) (types.UID, error) {
		start := time.Now()
		err := c.State.Unprepare(ctx, claim.UID)
		outcome := drivermetrics.OutcomeSuccess
		if err != nil {
			outcome, err = drivermetrics.OutcomeError, fmt.Errorf("claim %s: %w", claim.NamespacedName, err)
		}
		c.Metrics.ObserveUnprepare(outcome, time.Since(start))
		return claim.UID, err
	})
}

func (c *Claims) event(claim *resourceapi.ResourceClaim, eventType, reason, action, format string, args ...any) {
	if c.Recorder == nil {
		return
	}
	c.Recorder.Eventf(claim, nil, eventType, reason, action, format, args...)
}
