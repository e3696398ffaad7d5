// Package deviceslice turns a node's discovered FPGA ports into the DRA
// devices the driver publishes, and those devices into ResourceSlices: the
// one definition the kubelet plugin, the discover command and the
// autoscalers' slice templates share.
package deviceslice

import (
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Attribute names every device has (where known), qualified by the
// driver name in a slice. A family adds its own (discovery.Attribute).
const (
	AttrInterfaceID  = "interfaceID"
	AttrAFUID        = "afuID"
	AttrKernelDriver = "kernelDriver"
	AttrVendorID     = "vendorID"
	AttrDeviceID     = "deviceID"
	AttrModel        = "model"
	AttrNUMANode     = "numaNode"
	AttrProgrammable = "programmable"
	AttrHealthy      = "healthy"
)

// TaintUnhealthy is the key of the NoSchedule taint an unhealthy device
// carries in the slice; its value says why in a few words.
const TaintUnhealthy = "unhealthy"

// TaintRenumbered is the key of the NoExecute taint of a device a running
// container may reach by a device number it was given before the node's
// cards were enumerated anew (Options.Renumbered), with the value
// TaintRenumberedValue: its pods are evicted, and no claim gets it, until
// the claims concerned are unprepared.
const (
	TaintRenumbered      = "renumbered"
	TaintRenumberedValue = "container-holds-stale-device-number"
)

// Condition types of a device programmed before binding: its binding
// condition and binding failure condition, qualified by the driver name.
const (
	ConditionProgrammed        = "programmed"
	ConditionProgrammingFailed = "programming-failed"
)

// Options are the node-level facts that go into every device.
type Options struct {
	DriverName string
	// Programmable is false when the node forbids reprogramming.
	Programmable bool
	// Root is the discovery root; the standard PCIe root attribute is
	// resolved below Root/sys.
	Root string
	// UnhealthyEffect is the effect of the taint an unhealthy device
	// carries: NoSchedule (the default) keeps new claims away; NoExecute
	// also evicts pods that use it.
	UnhealthyEffect resourceapi.DeviceTaintEffect
	// BindingConditions gives every device the binding condition
	// <driver>/programmed and the failure condition
	// <driver>/programming-failed (the node programs before binding).
	BindingConditions bool
	// Quarantined devices (name to reason) carry the NoSchedule taint
	// <driver>/programming-failed with the reason as value.
	Quarantined map[string]string
	// Renumbered devices (name to the holder that reaches it by an old
	// device number) carry the NoExecute taint <driver>/renumbered.
	Renumbered map[string]string
}

// Devices turns a discovery result into one DRA device per port, in card
// and port order (the order is the allocator's preference).
func Devices(res *discovery.Result, o Options) []resourceapi.Device {
	var devices []resourceapi.Device
	pcieRoots := map[string]*string{}
	for _, c := range res.Cards {
		for _, p := range c.Ports {
			devices = append(devices, device(c, p, o, pcieRoots))
		}
	}
	return devices
}

// Device is the published device of one port.
func Device(c *discovery.Card, p *discovery.Port, o Options) resourceapi.Device {
	return device(c, p, o, map[string]*string{})
}

func device(c *discovery.Card, p *discovery.Port, o Options, pcieRoots map[string]*string) resourceapi.Device {
	q := func(name string) resourceapi.QualifiedName {
		return resourceapi.QualifiedName(o.DriverName + "/" + name)
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	flag := func(b bool) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{BoolValue: ptr.To(b)} }
	model := c.Model
	if model == "" && c.VendorID != "" && c.DeviceID != "" {
		model = strings.ToLower(c.VendorID + ":" + c.DeviceID)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		q(AttrInterfaceID):  str(c.InterfaceID),
		q(AttrAFUID):        str(p.AFUID),
		q(AttrKernelDriver): str(string(c.Driver)),
		q(AttrVendorID):     str(c.VendorID),
		q(AttrDeviceID):     str(c.DeviceID),
		q(AttrModel):        str(model),
		q(AttrProgrammable): flag(o.Programmable),
		q(AttrHealthy):      flag(p.Health.Healthy),
	}
	if c.NUMANode >= 0 {
		attrs[q(AttrNUMANode)] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(c.NUMANode))}
	}
	for _, a := range append(slices.Clone(c.Attributes), p.Attributes...) {
		switch v := a.Value.(type) {
		case string:
			attrs[q(a.Name)] = str(v)
		case int64:
			attrs[q(a.Name)] = resourceapi.DeviceAttribute{IntValue: ptr.To(v)}
		case bool:
			attrs[q(a.Name)] = flag(v)
		}
	}
	// An attribute the kernel did not report is left out, never published
	// empty: a selector that tests it then fails instead of matching "".
	// So is one longer than a slice holds (a broken attribute): the API
	// server would refuse the whole slice, and every device of the node
	// with it.
	for name, a := range attrs {
		if a.StringValue != nil && (*a.StringValue == "" || len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength) {
			delete(attrs, name)
		}
	}
	if a, err := deviceattribute.GetPCIBusIDAttribute(p.PCIAddress); err == nil {
		attrs[a.Name] = a.Value
	}
	// The PCIe root is one readlink of Root/sys/bus/pci/devices/<address>,
	// left outside discovery's bounded reader on purpose: readlink of a
	// sysfs symlink is answered by kernfs from its in-memory tree and
	// never calls into the device's driver, so a wedged card cannot stall
	// it (and readlink of anything but a symlink, a FIFO in a simulated
	// tree included, fails at once with EINVAL without opening it). Only
	// reads of attributes, which reach the driver, need the bound.
	root, ok := pcieRoots[p.PCIAddress]
	if !ok {
		if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(p.PCIAddress, deviceattribute.WithFSFromRoot(filepath.Join(o.Root, "sys"))); err == nil {
			root = a.Value.StringValue
		}
		pcieRoots[p.PCIAddress] = root
	}
	if root != nil {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: root}
	}
	d := resourceapi.Device{Name: p.DeviceName(), Attributes: attrs}
	if o.BindingConditions && o.Programmable {
		d.BindingConditions = []string{qualified(o.DriverName, ConditionProgrammed)}
		d.BindingFailureConditions = []string{qualified(o.DriverName, ConditionProgrammingFailed)}
	}
	if reason, ok := o.Quarantined[d.Name]; ok {
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: qualified(o.DriverName, ConditionProgrammingFailed), Value: reason, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	if _, ok := o.Renumbered[d.Name]; ok {
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: qualified(o.DriverName, TaintRenumbered), Value: TaintRenumberedValue, Effect: resourceapi.DeviceTaintEffectNoExecute})
	}
	if !p.Health.Healthy {
		effect := o.UnhealthyEffect
		if effect == "" {
			effect = resourceapi.DeviceTaintEffectNoSchedule
		}
		d.Taints = append(d.Taints, resourceapi.DeviceTaint{
			Key:    o.DriverName + "/" + TaintUnhealthy,
			Value:  TaintValue(p.Health),
			Effect: effect,
		})
	}
	return d
}

// TaintValue is the value of an unhealthy device's taint: its first
// cause ("read-of-afu_id-timed-out", "port-errors-0x4"), a valid label
// value an admin reads at a glance; the full reasons go to the kubelet's
// health stream and the driver's log.
func TaintValue(h discovery.Health) string {
	if c := h.Cause(); c != "" {
		return c
	}
	return "unknown"
}

// qualified is a condition or taint key qualified by the driver name.
func qualified(driverName, name string) string { return driverName + "/" + name }
