package draplugin

import (
	"context"
	"errors"
	"slices"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
)

// publish hands the node's devices to the ResourceSlice controller, which
// it starts the first time: the kubeletplugin helper's own publishing
// keeps the library's 30 s delay before it puts back a slice someone
// deleted; this one uses SliceSyncDelay.
func (d *Driver) publish(ctx context.Context) {
	if !d.isActive() {
		return // Activate publishes
	}
	// Under slicesMu, the last of concurrent publishes sees the latest
	// devices and quarantines.
	d.slicesMu.Lock()
	defer d.slicesMu.Unlock()
	d.mu.Lock()
	res := d.devices
	quarantined := make(map[string]string, len(d.quarantined))
	for dev, q := range d.quarantined {
		quarantined[dev] = q.reason
	}
	d.mu.Unlock()
	if res == nil {
		return // the first discovery pass publishes
	}
	var renumbered map[string]string
	if d.claims != nil {
		renumbered = d.claims.RenumberedDevices(res)
	}
	d.renumbered.Store(len(renumbered) > 0)
	devices := deviceslice.Devices(res, deviceslice.Options{
		DriverName: d.cfg.DriverName, Programmable: d.cfg.Programmable, Root: d.cfg.Scanner.Root, UnhealthyEffect: d.cfg.UnhealthyEffect,
		BindingConditions: d.binding.Load(), Quarantined: quarantined, Renumbered: renumbered,
	})
	resources := deviceslice.Resources(d.cfg.NodeName, devices)
	if d.slices != nil {
		d.slices.Update(&resources)
		return
	}
	if ctx.Err() != nil {
		return // stopping
	}
	logger := klog.LoggerWithName(klog.FromContext(ctx), "ResourceSlice controller")
	var err error
	d.slices, err = resourceslice.StartController(klog.NewContext(ctx, logger), resourceslice.Options{
		DriverName: d.cfg.DriverName,
		KubeClient: d.cfg.KubeClient,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: d.cfg.NodeName},
		Resources:  &resources,
		SyncDelay:  &d.cfg.SliceSyncDelay,
		// Publishing errors are retried by the controller with backoff.
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			var dropped *resourceslice.DroppedFieldsError
			if errors.As(err, &dropped) && slices.Contains(dropped.DisabledFeatures(), "DRADeviceBindingConditions") && d.binding.Swap(false) {
				klog.FromContext(ctx).Info("The API server drops binding conditions (feature DRADeviceBindingConditions off): claims are programmed at prepare instead of before binding")
				d.stopBinder()
				go d.publish(ctx)
				return
			}
			utilruntime.HandleErrorWithContext(ctx, err, msg)
		},
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Publishing ResourceSlices failed")
	}
}

// BindingConditions reports whether the driver programs claims before
// binding (its devices carry binding conditions).
func (d *Driver) BindingConditions() bool { return d.binding.Load() }

// quarantine is why and until when a device is kept out of allocations.
type quarantine struct {
	reason string
	until  time.Time
}

// Quarantine keeps a device out of new allocations for QuarantineTime
// (a taint <driver>/programming-failed, NoSchedule, valued reason): its
// programming failed before binding, and the claim the scheduler
// allocates again must go elsewhere.
func (d *Driver) Quarantine(device, reason string) {
	d.mu.Lock()
	d.quarantined[device] = quarantine{reason: reason, until: time.Now().Add(d.cfg.QuarantineTime)}
	d.mu.Unlock()
	klog.FromContext(d.ctx).Info("Device quarantined after a failed programming", "device", device, "reason", reason, "for", d.cfg.QuarantineTime)
	d.publish(d.ctx)
}

// expireQuarantines lifts quarantines once their time is up.
func (d *Driver) expireQuarantines(ctx context.Context) {
	ticker := time.NewTicker(max(d.cfg.QuarantineTime/10, time.Second))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticker.C:
			d.mu.Lock()
			expired := false
			for dev, q := range d.quarantined {
				if now.After(q.until) {
					delete(d.quarantined, dev)
					expired = true
				}
			}
			d.mu.Unlock()
			if expired {
				d.publish(ctx)
			}
		}
	}
}
