// Package program finds, verifies and loads FPGA bitstreams: the GBS, AOCX
// and xclbin formats, the node's bitstream repository, the card families'
// programming (Family, Register: DFL and OPAE ioctls, XRT's tool for Alveo
// cards) and a simulated programmer for tests and demos.
package program

import (
	"context"
	"fmt"
	"strings"
	"sync"

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

// ProgrammerKinds lists the kinds of the families this package programs
// itself; NewProgrammer also takes the name of any family registered
// since (see Register).
var ProgrammerKinds = []string{KindAuto, KindDFL, KindOPAE, KindXRT, KindSim}

type programmerConfig struct {
	sim *SimProgrammer
	ProgrammerConfig
}

// ProgrammerOption configures NewProgrammer.
type ProgrammerOption func(*programmerConfig)

// WithSimulator makes kind "sim" use s rather than a new SimProgrammer.
func WithSimulator(s *SimProgrammer) ProgrammerOption {
	return func(c *programmerConfig) { c.sim = s }
}

// NewProgrammer returns the backend for kind: a registered family's name
// ("dfl", "opae", "xrt", ...) gives that family's programmer (DFL and OPAE
// issue the kernel drivers' PR ioctls, serialised per FME across the
// process; XRT runs XRT's tool, configured by WithXRT), "auto" picks the
// programmer of each card's family per call, "sim" simulates.
func NewProgrammer(kind string, opts ...ProgrammerOption) (Programmer, error) {
	var cfg programmerConfig
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := cfg.XRT.withDefaults(); err != nil {
		return nil, err
	}
	switch kind {
	case KindAuto, "":
		return &autoProgrammer{cfg: cfg.ProgrammerConfig, backends: map[discovery.KernelDriver]Programmer{}}, nil
	case KindSim:
		if cfg.sim != nil {
			return cfg.sim, nil
		}
		return &SimProgrammer{}, nil
	}
	if f := FamilyOf(discovery.KernelDriver(kind)); f != nil {
		return f.NewProgrammer(cfg.ProgrammerConfig)
	}
	return nil, fmt.Errorf("programmer %q is not one of %s", kind, strings.Join(kinds(), ", "))
}

// autoProgrammer dispatches each call to the programmer of the card's
// family, made at its first card.
type autoProgrammer struct {
	cfg      ProgrammerConfig
	mu       sync.Mutex
	backends map[discovery.KernelDriver]Programmer
}

func (a *autoProgrammer) Name() string { return KindAuto }

func (a *autoProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	p, err := a.backend(card)
	if err != nil {
		return err
	}
	return p.Program(ctx, card, port, payload)
}

// backend returns the programmer of card's family.
func (a *autoProgrammer) backend(card *discovery.Card) (Programmer, error) {
	if card == nil {
		return nil, fmt.Errorf("%w: card is required", ErrProgramFailed)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p := a.backends[card.Driver]; p != nil {
		return p, nil
	}
	f := FamilyOf(card.Driver)
	if f == nil {
		return nil, fmt.Errorf("%w: card %s has kernel driver %q, which no programmer handles (want one of %s)", ErrProgramFailed, card.PCIAddress, card.Driver, strings.Join(kinds()[1:len(kinds())-1], ", "))
	}
	p, err := f.NewProgrammer(a.cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: card %s: programmer of family %q: %w", ErrProgramFailed, card.PCIAddress, card.Driver, err)
	}
	a.backends[card.Driver] = p
	return p, nil
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
