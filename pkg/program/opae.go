package program

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// opaeProgrammer programs through the out-of-tree OPAE driver's
// FPGA_FME_PORT_PR ioctl on the card's intel-fpga-fme.N node.
type opaeProgrammer struct {
	locks *fmeLocks
}

func (o *opaeProgrammer) Name() string { return string(discovery.DriverOPAE) }

// Program issues FPGA_FME_PORT_PR for port with payload (padded to a
// multiple of 4), holding the card's FME lock. On EIO the error carries the
// hardware status bitmask the driver returns. ctx bounds the wait for the
// lock only: the ioctl itself cannot be interrupted.
func (o *opaeProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	return o.locks.withFME(ctx, card, port, payload, func(fd int, portID uint32, payload []byte) error {
		return opaePortPR(fd, card, portID, payload)
	})
}

func opaePortPR(fd int, card *discovery.Card, portID uint32, payload []byte) error {
	arg := opaeFMEPortPRArg{
		Argsz:         uint32(unsafe.Sizeof(opaeFMEPortPRArg{})),
		PortID:        portID,
		BufferSize:    uint32(len(payload)),
		BufferAddress: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(payload)))),
	}
	err := ioctl(fd, opaeFMEPortPR, unsafe.Pointer(&arg))
	// The kernel reads payload through BufferAddress, which the garbage
	// collector does not see: keep payload alive until the ioctl returned.
	runtime.KeepAlive(payload)
	if err != nil {
		return prError("OPAE", "FPGA_FME_PORT_PR", card, portID, arg.BufferSize, uintptr(arg.Argsz), err, fmt.Sprintf(" (status 0x%x)", arg.Status))
	}
	return nil
}
