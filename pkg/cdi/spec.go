package cdi

import (
	"fmt"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Names of the environment variables set in every container that gets a
// claim's devices. Each holds a comma-separated list, one entry per port.
const (
	// EnvPorts lists the container paths of the port device nodes.
	EnvPorts = "FPGA_PORTS"
	// EnvAFUIDs lists the accelerator function loaded behind each port.
	EnvAFUIDs = "FPGA_AFU_IDS"
	// EnvInterfaceIDs lists the interface ID of each port's region.
	EnvInterfaceIDs = "FPGA_INTERFACE_IDS"
	// EnvAcceleratorUnits lists the PCI address of the function carrying
	// each port, as the b-com FPGA device plugin does.
	EnvAcceleratorUnits = "ACCELERATOR_UNITS"
	// EnvDeviceNodes lists every node the container got, each device's
	// main node (the one in FPGA_PORTS) first; set only where a device has
	// more than its main node (an Alveo card with xfpga user nodes).
	EnvDeviceNodes = "FPGA_DEVICE_NODES"
)

// devicePermissions lets a container read and write a port node but not
// create device nodes.
const devicePermissions = "rw"

// buildSpec returns the CDI spec of a claim and the CDI device IDs of its
// devices, in order. The spec's version is the lowest that supports its
// content, so that older runtimes read it.
func (w *Writer) buildSpec(claimUID string, devices []Device) (*cdispec.Spec, []string, error) {
	if len(devices) == 0 {
		return nil, nil, fmt.Errorf("claim %s: no devices: a claim spec needs at least one", claimUID)
	}
	spec := &cdispec.Spec{Kind: w.vendor + "/" + w.class}
	ids := make([]string, 0, len(devices))
	seen := make(map[string]bool, len(devices))
	for i, d := range devices {
		if err := d.validate(); err != nil {
			return nil, nil, fmt.Errorf("claim %s: device %d: %w", claimUID, i, err)
		}
		if seen[d.name] {
			return nil, nil, fmt.Errorf("claim %s: device %s is given twice", claimUID, d.name)
		}
		seen[d.name] = true

		var nodes []*cdispec.DeviceNode
		for _, n := range d.nodes {
			nodes = append(nodes, &cdispec.DeviceNode{
				Path:        n.Path,
				HostPath:    n.HostPath,
				Type:        "c",
				Major:       int64(n.Major),
				Minor:       int64(n.Minor),
				Permissions: devicePermissions,
			})
		}
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           cdiDeviceName(claimUID, d.name),
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: nodes},
		})
		ids = append(ids, w.deviceID(claimUID, d.name))
	}
	values := ContainerEnv(devices)
	for _, name := range envNames {
		if v, ok := values[name]; ok {
			spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, name+"="+v)
		}
	}

	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("claim %s: CDI spec version: %w", claimUID, err)
	}
	spec.Version = version
	return spec, ids, nil
}

// envNames orders the variables in a spec.
var envNames = []string{EnvPorts, EnvAFUIDs, EnvInterfaceIDs, EnvAcceleratorUnits, EnvDeviceNodes}

// ContainerEnv is the environment a container with devices gets: each
// variable a comma-separated list in device order. The DRA path puts it
// in the claim's CDI spec; the device-plugin path returns it from Allocate.
func ContainerEnv(devices []Device) map[string]string {
	var ports, afuIDs, interfaceIDs, units, nodes []string
	extra := false
	for _, d := range devices {
		if len(d.nodes) == 0 {
			continue // rejected by NewDevice
		}
		ports = append(ports, d.nodes[0].Path)
		for _, n := range d.nodes {
			nodes = append(nodes, n.Path)
		}
		extra = extra || len(d.nodes) > 1
		afuIDs = append(afuIDs, d.afuID)
		interfaceIDs = append(interfaceIDs, d.interfaceID)
		units = append(units, d.pciAddress)
	}
	env := map[string]string{
		EnvPorts:            strings.Join(ports, ","),
		EnvAFUIDs:           strings.Join(afuIDs, ","),
		EnvInterfaceIDs:     strings.Join(interfaceIDs, ","),
		EnvAcceleratorUnits: strings.Join(units, ","),
	}
	if extra {
		env[EnvDeviceNodes] = strings.Join(nodes, ",")
	}
	return env
}
