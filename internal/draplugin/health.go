package draplugin

import (
	"context"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// healthReport states the health of every published device.
func (d *Driver) healthReport(res *discovery.Result, now time.Time) kubeletplugin.DeviceHealthReport {
	var report kubeletplugin.DeviceHealthReport
	for _, p := range res.Ports() {
		h := kubeletplugin.DeviceHealth{
			PoolName:           d.cfg.NodeName,
			DeviceName:         p.DeviceName(),
			Health:             kubeletplugin.HealthStatusHealthy,
			LastUpdated:        now,
			HealthCheckTimeout: 3 * d.cfg.HealthResend,
		}
		if !p.Health.Healthy {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = p.Health.String()
		}
		report.Devices = append(report.Devices, h)
	}
	return report
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of every
// device at once, again at every change, and at least every HealthResend so
// the kubelet never marks a device Unknown.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	ticker := time.NewTicker(d.cfg.HealthResend)
	defer ticker.Stop()
	for {
		changed := d.DevicesChanged()
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.healthReport(d.Devices(), time.Now()):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-ticker.C:
		}
	}
}
