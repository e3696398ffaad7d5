// Package schedulertest runs the scheduler's own structured allocator
// (k8s.io/dynamic-resource-allocation/structured) in tests, to prove that
// DeviceClasses select the devices a driver publishes.
package schedulertest

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Classes serves DeviceClasses to the allocator, by name.
type Classes map[string]*resourceapi.DeviceClass

// List implements structured.DeviceClassLister.
func (c Classes) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, class := range c {
		out = append(out, class)
	}
	return out, nil
}

// Get implements structured.DeviceClassLister.
func (c Classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if class, ok := c[name]; ok {
		return class, nil
	}
	return nil, fmt.Errorf("device class %s not found", name)
}

// Allocate runs the scheduler's allocator, with device taints and
// prioritized lists on, for claim on the node nodeName against slices and
// classes, the devices in inUse being allocated already. It returns nil
// when the claim cannot be allocated.
func Allocate(ctx context.Context, classes Classes, slices []*resourceapi.ResourceSlice, inUse sets.Set[structured.DeviceID], nodeName string, claim *resourceapi.ResourceClaim) (*resourceapi.AllocationResult, error) {
	a, err := structured.NewAllocator(ctx,
		structured.Features{DeviceTaints: true, PrioritizedList: true},
		structured.AllocatedState{AllocatedDevices: inUse},
		classes, slices, cel.NewCache(10, cel.Features{}))
	if err != nil {
		return nil, fmt.Errorf("new allocator: %w", err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	results, err := a.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		return nil, fmt.Errorf("allocate: %w", err)
	}
	if len(results) == 0 {
		return nil, nil
	}
	return &results[0], nil
}
