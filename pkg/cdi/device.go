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
	name        string
	node        discovery.DevNode
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
// The device's only device node is the port's. A port whose node is missing,
// not an absolute path, or the card's FME node is recorded as an error that
// WriteClaimSpec returns, so a discovery bug can never hand the FME to a
// container.
func NewDevice(card *discovery.Card, port *discovery.Port, afuID string) Device {
	switch {
	case card == nil:
		return Device{err: errors.New("device has no card")}
	case port == nil:
		return Device{err: fmt.Errorf("device on card %s has no port", card.PCIAddress)}
	}
	name := port.DeviceName()
	node := port.Node
	switch {
	case !filepath.IsAbs(node.Path):
		return Device{name: name, err: fmt.Errorf("device %s: port node path %q is not absolute", name, node.Path)}
	case node.Path == card.FME.Path || (node.Major != 0 && node.Major == card.FME.Major && node.Minor == card.FME.Minor):
		return Device{name: name, err: fmt.Errorf("device %s: port node %s (%d:%d) is the card's FME node %s (%d:%d): refusing to hand the FME to a container",
			name, node.Path, node.Major, node.Minor, card.FME.Path, card.FME.Major, card.FME.Minor)}
	}
	if afuID == "" {
		afuID = port.AFUID
	}
	return Device{
		name:        name,
		node:        node,
		pciAddress:  port.PCIAddress,
		afuID:       afuID,
		interfaceID: card.InterfaceID,
	}
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
