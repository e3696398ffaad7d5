// Package slicetemplate predicts, before a node exists, the devices the
// FPGA DRA driver will publish on it, for autoscalers that simulate DRA:
// Karpenter's InstanceType.DynamicResources and Cluster Autoscaler's node
// templates.
//
// A template holds exactly the devices the driver publishes on a node of
// the shape (the same names, one per port, in the same order) with the
// attributes a node has from boot on; attributes a node learns only while
// it runs (the loaded AFU, health) and health taints are left out, so a
// selector that tests them does not match a template. It is built the way
// the driver builds its slice: a simulated node of the shape is scanned by
// package discovery and turned into devices by the driver's slice code.
package slicetemplate

import (
	"fmt"
	"maps"
	"os"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// DefaultNodeName names the node, and so the pool, of a template whose
// Options name none.
const DefaultNodeName = "fpga-template-node"

// runtimeOnly are the attributes a node learns only while it runs: the AFU
// loaded in a region and the outcome of the health checks. No template
// holds them.
var runtimeOnly = []string{deviceslice.AttrAFUID, deviceslice.AttrHealthy}

// notInModel are boot-stable attributes that a card model and count do not
// determine: the platform's NUMA and socket placement, the build of the
// flashed FIM, and the instance's PCI addresses. A template read from a
// node keeps them; one made for a shape leaves them out (its device names
// follow the simulated node's PCI addresses: unique, but not a real node's).
var notInModel = []string{
	deviceslice.AttrNUMANode, "socketID", "bitstreamID", "serial",
	string(deviceattribute.StandardDeviceAttributePCIBusID), string(deviceattribute.StandardDeviceAttributePCIeRoot),
}

// Options name what a template is published as.
type Options struct {
	// DriverName is the daemon's --driver-name; v1alpha1.DriverName when
	// empty.
	DriverName string
	// NodeName names the template's node and pool; DefaultNodeName when
	// empty.
	NodeName string
}

func (o Options) withDefaults() Options {
	if o.DriverName == "" {
		o.DriverName = v1alpha1.DriverName
	}
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	return o
}

// Template is what the driver will publish on a node: one device per FPGA
// port, without runtime-only attributes and taints.
type Template struct {
	DriverName string
	NodeName   string
	Devices    []resourceapi.Device
}

// ForShape returns the template of a node of shape s.
func ForShape(s Shape, o Options) (*Template, error) {
	m, s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fpga-slicetemplate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	n, err := writeNode(dir, m, s, true)
	if err != nil {
		return nil, err
	}
	return build(n.Root, s.KernelDriver, s.programmable(), o, slices.Concat(runtimeOnly, notInModel))
}

// FromNode returns the template of nodes like the one whose tree is below
// root (a host's "/", or a simulated node's directory): what the driver
// publishes there with --programmable=programmable, without runtime-only
// attributes. force selects the kernel driver as the daemon's
// --kernel-driver does ("" detects it).
func FromNode(root string, force discovery.KernelDriver, programmable bool, o Options) (*Template, error) {
	return build(root, force, programmable, o, runtimeOnly)
}

func build(root string, force discovery.KernelDriver, programmable bool, o Options, drop []string) (*Template, error) {
	o = o.withDefaults()
	var sel discovery.Selection
	if force != "" {
		sel.Only = []discovery.KernelDriver{force}
	}
	res, err := (&discovery.Scanner{Root: root, Select: sel}).Scan()
	if err != nil {
		return nil, err
	}
	if len(res.Drivers) == 0 {
		return nil, fmt.Errorf("no FPGA kernel driver below %s: none of sys/class/fpga (OPAE), sys/class/fpga_region (DFL), sys/bus/pci/drivers/xocl (XRT) exists", root)
	}
	if len(res.Ports()) == 0 {
		return nil, fmt.Errorf("the %v drivers are loaded below %s but no usable FPGA device was found: %v", res.Drivers, root, res.Errors)
	}
	devices := deviceslice.Devices(res, deviceslice.Options{DriverName: o.DriverName, Programmable: programmable, Root: root})
	for i := range devices {
		devices[i] = withoutAttributes(devices[i], o.DriverName, drop)
	}
	return &Template{DriverName: o.DriverName, NodeName: o.NodeName, Devices: devices}, nil
}

// withoutAttributes returns d without taints and without the named
// attributes (the driver's own names are qualified by driverName here).
func withoutAttributes(d resourceapi.Device, driverName string, names []string) resourceapi.Device {
	d.Taints = nil
	d.Attributes = maps.Clone(d.Attributes)
	for _, name := range names {
		delete(d.Attributes, resourceapi.QualifiedName(name))
		delete(d.Attributes, resourceapi.QualifiedName(driverName+"/"+name))
	}
	return d
}

// ResourceSlices renders the template as the ResourceSlice objects the
// driver publishes on the node: one pool named after the node.
func (t *Template) ResourceSlices() []resourceapi.ResourceSlice {
	return deviceslice.SliceObjects(t.DriverName, t.NodeName, deviceslice.Resources(t.NodeName, t.Devices))
}
