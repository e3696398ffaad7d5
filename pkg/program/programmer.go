// Package program finds, verifies and loads FPGA bitstreams: the GBS and AOCX
// formats, the node's bitstream repository, and the partial-reconfiguration
// backends (DFL and OPAE ioctls, and a simulated one for tests and demos).
package program

import (
	"context"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Programmer performs partial reconfiguration of the region behind one port.
//
// Program hands payload (the raw bitstream that follows a GBS header) to the
// hardware and returns when the hardware reports completion or failure. It
// does not check interface IDs nor verify the loaded AFU: Load does that, the
// same way for every implementation. Implementations must be safe for
// concurrent use on distinct ports; callers never program one port twice at
// once.
type Programmer interface {
	Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error
	// Name identifies the backend in logs and metrics ("dfl", "opae", "sim").
	Name() string
}
