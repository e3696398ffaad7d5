package cdi

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Device is one allocated port as a container gets it. Build it with
// NewDevice; the zero Device is rejected by Writer.WriteClaimSpec.
type Device struct {
	name string
	// nodes are the device's nodes, its main node first.
	nodes       []discovery.DevNode
	pciAddress  string
	afuID       string
	interfaceID string
	// err records why NewDevice could not build a usable device; it is
	// returned by WriteClaimSpec.
	err error
}

// NewDevice describes port, found on card, with afuID as the accelerator
// function loaded behind it (the port's AFUID when afuID is empty: pass the
// ID read after programming when the driver programmed the port).
//
// The device's nodes are the port's own (port.Nodes: an Intel port's node;
// an Alveo card's render node and xfpga user nodes). A node that is
// missing, not an absolute path, or a management node (ContainerNodes) is
// recorded as an error that WriteClaimSpec
// returns, so a discovery bug can never hand a management node to a
// container.
func NewDevice(card *discovery.Card, port *discovery.Port, afuID string) Device {
	switch {
	case card == nil:
		return Device{err: errors.New("device has no card")}
	case port == nil:
		return Device{err: fmt.Errorf("device on card %s has no port", card.PCIAddress)}
	}
	name := port.DeviceName()
	nodes, err := ContainerNodes(card, port)
	if err != nil {
		return Device{name: name, err: err}
	}
	if afuID == "" {
		afuID = port.AFUID
	}
	return Device{
		name:        name,
		nodes:       nodes,
		pciAddress:  port.PCIAddress,
		afuID:       afuID,
		interfaceID: card.InterfaceID,
	}
}

// ContainerNodes returns the nodes a container using port gets
// (port.Nodes), or an error when one is not an absolute path, is one of
// the card's management nodes (card.ManagementNodes), or is named as a
// management node of any card (discovery.ManagementFamily): a discovery bug
// must never hand a management node to a container. Every path that gives
// a container a port's nodes (CDI specs, the device-plugin endpoint's
// Allocate) takes them from here.
func ContainerNodes(card *discovery.Card, port *discovery.Port) ([]discovery.DevNode, error) {
	name := port.DeviceName()
	nodes := port.Nodes()
	for _, node := range nodes {
		if !filepath.IsAbs(node.Path) {
			return nil, fmt.Errorf("device %s: node path %q is not absolute", name, node.Path)
		}
		for _, m := range card.ManagementNodes() {
			if node.Path == m.Path || (node.Major != 0 && node.Major == m.Major && node.Minor == m.Minor) {
				return nil, fmt.Errorf("device %s: node %s (%d:%d) is the card's management node %s (%d:%d): refusing to hand it to a container",
					name, node.Path, node.Major, node.Minor, m.Path, m.Major, m.Minor)
			}
		}
		if f := discovery.ManagementFamily(node.Path); f != "" {
			return nil, fmt.Errorf("device %s: node %s (%d:%d) is named as a management node of card family %q: refusing to hand it to a container",
				name, node.Path, node.Major, node.Minor, f)
		}
	}
	return nodes, nil
}

// Name is the DRA device name of the port, e.g. "fpga-0000-81-00-0-p0".
func (d Device) Name() string { return d.name }

// validate returns the error NewDevice recorded, or an error for a Device
// not built by NewDevice.
func (d Device) validate() error {
	if d.err != nil {
		return d.err
	}
	if d.name == "" {
		return errors.New("device was not built by NewDevice")
	}
	return nil
}
