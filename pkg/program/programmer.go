// Package program finds, verifies and loads FPGA bitstreams: the GBS, AOCX
// and xclbin formats, the node's bitstream repository, and the programming
// backends (DFL and OPAE ioctls, XRT's tool for Alveo cards, and a simulated
// one for tests and demos).
package program

import (
	"context"
	"fmt"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Programmer performs partial reconfiguration of the region behind one port.
//
// Program hands payload (the raw bitstream that follows a GBS header, or a
// whole xclbin file for an XRT card) to the hardware and returns when the
// hardware reports completion or failure. It does not check interface IDs
// nor verify the loaded AFU: Load does that, the same way for every
// implementation. Implementations must be safe for
// concurrent use on distinct ports; callers never program one port twice at
// once.
type Programmer interface {
	Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error
	// Name identifies the backend in logs and metrics ("dfl", "opae",
	// "xrt", "sim").
	Name() string
}

// Programmer kinds, as a --programmer flag takes them.
const (
	// KindAuto picks the DFL, OPAE or XRT backend by each card's kernel
	// driver.
	KindAuto = "auto"
	KindDFL  = "dfl"
	KindOPAE = "opae"
	// KindXRT loads xclbins on AMD/Xilinx Alveo cards through XRT's tool.
	KindXRT = "xrt"
	// KindSim simulates programming on a simulated node (SimProgrammer).
	KindSim = "sim"
)

// ProgrammerKinds lists the kinds NewProgrammer accepts.
var ProgrammerKinds = []string{KindAuto, KindDFL, KindOPAE, KindXRT, KindSim}

type programmerConfig struct {
	sim *SimProgrammer
	xrt XRTConfig
}

// ProgrammerOption configures NewProgrammer.
type ProgrammerOption func(*programmerConfig)

// WithSimulator makes kind "sim" use s rather than a new SimProgrammer.
func WithSimulator(s *SimProgrammer) ProgrammerOption {
	return func(c *programmerConfig) { c.sim = s }
}

// NewProgrammer returns the backend for kind: "dfl" and "opae" issue the
// kernel drivers' PR ioctls, "xrt" runs XRT's tool (configured by WithXRT),
// "auto" picks one of them per call by card.Driver, "sim" simulates. The DFL
// and OPAE backends serialise PR per FME across the whole process.
func NewProgrammer(kind string, opts ...ProgrammerOption) (Programmer, error) {
	var cfg programmerConfig
	for _, o := range opts {
		o(&cfg)
	}
	xrtCfg, err := cfg.xrt.withDefaults()
	if err != nil {
		return nil, err
	}
	locks := &processFMELocks
	switch kind {
	case KindAuto, "":
		return &autoProgrammer{dfl: &dflProgrammer{locks: locks}, opae: &opaeProgrammer{locks: locks}, xrt: &xrtProgrammer{cfg: xrtCfg}}, nil
	case KindDFL:
		return &dflProgrammer{locks: locks}, nil
	case KindOPAE:
		return &opaeProgrammer{locks: locks}, nil
	case KindXRT:
		return &xrtProgrammer{cfg: xrtCfg}, nil
	case KindSim:
		if cfg.sim != nil {
			return cfg.sim, nil
		}
		return &SimProgrammer{}, nil
	}
	return nil, fmt.Errorf("programmer %q is not one of %s", kind, strings.Join(ProgrammerKinds, ", "))
}

// autoProgrammer dispatches each call to the backend of the card's kernel
// driver.
type autoProgrammer struct {
	dfl  *dflProgrammer
	opae *opaeProgrammer
	xrt  *xrtProgrammer
}

func (a *autoProgrammer) Name() string { return KindAuto }

func (a *autoProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	p, err := a.backend(card)
	if err != nil {
		return err
	}
	return p.Program(ctx, card, port, payload)
}

// backend returns the programmer for card's kernel driver.
func (a *autoProgrammer) backend(card *discovery.Card) (Programmer, error) {
	if card == nil {
		return nil, fmt.Errorf("%w: card is required", ErrProgramFailed)
	}
	switch card.Driver {
	case discovery.DriverDFL:
		return a.dfl, nil
	case discovery.DriverOPAE:
		return a.opae, nil
	case discovery.DriverXRT:
		return a.xrt, nil
	}
	return nil, fmt.Errorf("%w: card %s has kernel driver %q, which no programmer handles (want %q, %q or %q)", ErrProgramFailed, card.PCIAddress, card.Driver, discovery.DriverDFL, discovery.DriverOPAE, discovery.DriverXRT)
}

// backendName is the Name of the backend p uses for card: for "auto", the
// one it picks.
func backendName(p Programmer, card *discovery.Card) string {
	if a, ok := p.(*autoProgrammer); ok {
		if b, err := a.backend(card); err == nil {
			return b.Name()
		}
	}
	return p.Name()
}
