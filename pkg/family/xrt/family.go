// Package xrt is the XRT card family: AMD/Xilinx Alveo cards under the
// xocl and xclmgmt drivers, found and health-checked below a root and
// loaded with xclbins through XRT's tool. Importing the package registers
// it (program.Register).
package xrt

import (
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// init registers the family, after the Intel ones: importing the package
// is what makes discovery find, and program load, XRT cards.
func init() { program.Register(Family{}) }

// Formats implements program.Family: an XRT card loads xclbins.
func (Family) Formats() []program.Format { return []program.Format{program.FormatXclbin} }

// NewProgrammer implements program.Family: XRT's tool, configured by
// cfg.XRT.
func (Family) NewProgrammer(cfg program.ProgrammerConfig) (program.Programmer, error) {
	return program.NewXRTProgrammer(cfg.XRT)
}

// ReadLoaded implements program.LoadedReader: the xclbin UUIDs the user
// PF reports, one per slot.
func (Family) ReadLoaded(port *discovery.Port, want string) (string, error) {
	return program.ReadXclbinUUID(port, want)
}

// LoadedKind implements program.LoadedReader.
func (Family) LoadedKind() string { return "xclbin" }
