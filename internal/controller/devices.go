package controller

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// publishedDevices returns the devices of the driver that the scheduler
// could allocate now, as CEL selectors see them: those in the newest
// generation of every pool, without a NoSchedule or NoExecute taint.
func (c *Controller) publishedDevices() ([]cel.Device, error) {
	slices, err := c.slices.List(labelsEverything)
	if err != nil {
		return nil, fmt.Errorf("list ResourceSlices from the informer cache: %w", err)
	}
	newest := map[string]int64{}
	for _, s := range slices {
		if s.Spec.Driver != c.driverName {
			continue
		}
		if g, ok := newest[s.Spec.Pool.Name]; !ok || s.Spec.Pool.Generation > g {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	var devices []cel.Device
	for _, s := range slices {
		if s.Spec.Driver != c.driverName || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		for _, d := range s.Spec.Devices {
			if blocked(d.Taints) {
				continue
			}
			devices = append(devices, cel.Device{
				Driver:                   s.Spec.Driver,
				AllowMultipleAllocations: d.AllowMultipleAllocations,
				Attributes:               d.Attributes,
				Capacity:                 d.Capacity,
			})
		}
	}
	return devices, nil
}

// blocked reports whether a taint keeps the scheduler from allocating a
// device to a claim that does not tolerate it.
func blocked(taints []resourceapi.DeviceTaint) bool {
	for _, t := range taints {
		if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
			return true
		}
	}
	return false
}

// countMatching counts the devices selector selects, evaluating it exactly
// as the scheduler does.
func (c *Controller) countMatching(ctx context.Context, selector string, devices []cel.Device) (int32, error) {
	expr := c.cel.GetOrCompile(selector)
	if expr.Error != nil {
		return 0, fmt.Errorf("compile selector %q: %w", selector, expr.Error)
	}
	var n int32
	for _, d := range devices {
		ok, _, err := expr.DeviceMatches(ctx, d)
		if err != nil {
			return 0, fmt.Errorf("evaluate selector %q: %w", selector, err)
		}
		if ok {
			n++
		}
	}
	return n, nil
}
