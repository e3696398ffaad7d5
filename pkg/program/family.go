package program

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Family is a card family whole: the discovery.Family that finds its
// cards, their health and device nodes, plus the bitstream formats its
// cards load and the programmer that loads them. Register it once and
// discovery, Load, NewProgrammer and the layers above handle its cards.
type Family interface {
	discovery.Family
	// Formats lists the bitstream formats the family's cards load; Load
	// refuses any other (ErrFormatMismatch).
	Formats() []Format
	// NewProgrammer returns the family's programmer, configured by cfg.
	NewProgrammer(cfg ProgrammerConfig) (Programmer, error)
}

// LoadedReader is implemented by a Family whose cards report the function
// loaded into a region other than as an ID attribute that reads EBUSY
// while busy: Load reads it back with ReadLoaded, waiting while the error
// matches ErrNotLoaded.
type LoadedReader interface {
	// ReadLoaded returns the ID of what is loaded behind port: want when
	// one of several slots holds it. It is not bounded; Load bounds it.
	ReadLoaded(port *discovery.Port, want string) (string, error)
	// LoadedKind names what ReadLoaded reads in messages ("xclbin").
	LoadedKind() string
}

// ProgrammerConfig is what NewProgrammer's options set for the families'
// programmers.
type ProgrammerConfig struct {
	// XRT configures the XRT family's programmer.
	XRT XRTConfig
}

// Register adds f to the one list of card families (discovery.Register):
// discovery then finds its cards, and Load and NewProgrammer program them.
// A family registered under a driver name already taken replaces that
// family.
func Register(f Family) { discovery.Register(f) }

// FamilyOf returns the registered family of kernel driver d, or nil when
// there is none or it does not program its cards (a discovery.Family
// registered alone).
func FamilyOf(d discovery.KernelDriver) Family {
	f, _ := discovery.FamilyOf(d).(Family)
	return f
}

// kinds lists the programmer kinds NewProgrammer takes: auto, every
// registered family that programs, sim.
func kinds() []string {
	out := []string{KindAuto}
	for _, f := range discovery.Families() {
		if _, ok := f.(Family); ok {
			out = append(out, string(f.Driver()))
		}
	}
	return append(out, KindSim)
}

// formatFits refuses a bitstream whose format the card's family does not
// load.
func formatFits(bs *Bitstream, card *discovery.Card, port *discovery.Port) error {
	f := FamilyOf(card.Driver)
	if f == nil {
		return fmt.Errorf("%w: card %s (port %s) has kernel driver %q, which no registered card family programs", ErrFormatMismatch, card.PCIAddress, port.DeviceName(), card.Driver)
	}
	if slices.Contains(f.Formats(), bs.Format) {
		return nil
	}
	names := make([]string, len(f.Formats()))
	for i, format := range f.Formats() {
		names[i] = string(format)
	}
	return fmt.Errorf("%w: bitstream %s is in format %s, but card %s (port %s) has kernel driver %q, whose cards load %s: use a bitstream in one of those formats built for interface %s",
		ErrFormatMismatch, bs.Path, bs.Format, card.PCIAddress, port.DeviceName(), card.Driver, strings.Join(names, " or "), card.InterfaceID)
}

// intelFamily is the DFL or OPAE family: Intel cards programmed through
// their FME's partial-reconfiguration ioctl.
type intelFamily struct {
	discovery.Family
	newProgrammer func(locks *fmeLocks) Programmer
}

func (intelFamily) Formats() []Format { return []Format{FormatGBS, FormatAOCX} }

func (f intelFamily) NewProgrammer(ProgrammerConfig) (Programmer, error) {
	return f.newProgrammer(&processFMELocks), nil
}

// MatchUevent implements discovery.UeventMatcher as the discovery family
// does: wrapping it must not hide its hot-plug events.
func (f intelFamily) MatchUevent(e discovery.Uevent) bool {
	m, ok := f.Family.(discovery.UeventMatcher)
	return ok && m.MatchUevent(e)
}

// init registers the programming of the families discovery finds
// itself (DFL and OPAE) in their place in the list.
func init() {
	Register(intelFamily{discovery.FamilyOf(discovery.DriverDFL), func(l *fmeLocks) Programmer { return &dflProgrammer{locks: l} }})
	Register(intelFamily{discovery.FamilyOf(discovery.DriverOPAE), func(l *fmeLocks) Programmer { return &opaeProgrammer{locks: l} }})
}
