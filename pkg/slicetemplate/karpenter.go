package slicetemplate

import (
	resourceapi "k8s.io/api/resource/v1"
)

// DynamicResources is Karpenter's InstanceType.DynamicResources
// (sigs.k8s.io/karpenter/pkg/cloudprovider, v1.14 and later) in JSON, field
// for field, with Karpenter's interned strings as plain strings: a
// provider copies it over with unique.Make. Karpenter evaluates DeviceClass
// and request selectors against these devices before a node exists.
type DynamicResources struct {
	ResourceSliceTemplates []ResourceSliceTemplate `json:"resourceSliceTemplates"`
}

// ResourceSliceTemplate is Karpenter's cloudprovider.ResourceSliceTemplate.
type ResourceSliceTemplate struct {
	Driver  string       `json:"driver"`
	Pool    ResourcePool `json:"pool"`
	Devices []Device     `json:"devices"`
}

// ResourcePool is Karpenter's cloudprovider.ResourcePool.
type ResourcePool struct {
	Name string `json:"name"`
}

// Device is Karpenter's cloudprovider.Device (the driver's devices use no
// capacity, counters or multiple allocations).
type Device struct {
	Name       string                                                    `json:"name"`
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
}

// Karpenter returns the template as Karpenter's DynamicResources: one
// slice template whose pool is named after the template's node.
func (t *Template) Karpenter() DynamicResources {
	devices := make([]Device, len(t.Devices))
	for i, d := range t.Devices {
		devices[i] = Device{Name: d.Name, Attributes: d.Attributes}
	}
	return DynamicResources{ResourceSliceTemplates: []ResourceSliceTemplate{{
		Driver: t.DriverName, Pool: ResourcePool{Name: t.NodeName}, Devices: devices,
	}}}
}
