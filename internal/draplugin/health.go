package draplugin

import (
	"context"
	"maps"
	"slices"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// healthReport states the health of every device published since Start:
// those discovered now, and as unhealthy those that were removed from the
// node (hot-unplugged) since.
func (d *Driver) healthReport(now time.Time) kubeletplugin.DeviceHealthReport {
	d.mu.Lock()
	res := d.devices
	gone := make(map[string]bool, len(d.published))
	for name := range d.published {
		gone[name] = true
	}
	d.mu.Unlock()
	var report kubeletplugin.DeviceHealthReport
	add := func(name string, healthy bool, message string) {
		h := kubeletplugin.DeviceHealth{
			PoolName:           d.cfg.NodeName,
			DeviceName:         name,
			Health:             kubeletplugin.HealthStatusHealthy,
			LastUpdated:        now,
			HealthCheckTimeout: 3 * d.cfg.HealthResend,
		}
		if !healthy {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = message
		}
		report.Devices = append(report.Devices, h)
	}
	for _, p := range res.Ports() {
		delete(gone, p.DeviceName())
		add(p.DeviceName(), p.Health.Healthy, p.Health.String())
	}
	for _, name := range slices.Sorted(maps.Keys(gone)) {
		add(name, false, "the device was removed from the node")
	}
	return report
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// device at once, again at every change, and at least every HealthResend so
// the kubelet never marks a device Unknown.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if _, err := d.discoveredDevices(ctx); err != nil {
		return nil
	}
	ticker := time.NewTicker(d.cfg.HealthResend)
	defer ticker.Stop()
	for {
		changed := d.DevicesChanged()
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport(time.Now()):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}
