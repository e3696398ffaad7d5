package program

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// dflProgrammer programs through the in-tree DFL driver's
// DFL_FPGA_FME_PORT_PR ioctl on the card's dfl-fme.N node.
type dflProgrammer struct {
	locks *fmeLocks
}

func (d *dflProgrammer) Name() string { return string(discovery.DriverDFL) }

// Program issues DFL_FPGA_FME_PORT_PR for port with payload (padded to a
// multiple of 4), holding the card's FME lock. ctx bounds the wait for the
// lock only: the ioctl itself cannot be interrupted.
func (d *dflProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	return d.locks.withFME(ctx, card, port, payload, func(fd int, portID uint32, payload []byte) error {
		return dflPortPR(fd, card, portID, payload)
	})
}

func dflPortPR(fd int, card *discovery.Card, portID uint32, payload []byte) error {
	v, err := unix.IoctlRetInt(fd, uint(dflGetAPIVersion))
	if err != nil {
		return fmt.Errorf("%w: DFL_FPGA_GET_API_VERSION on FME %s: %w: it is not a DFL FME node (is --programmer right for this kernel driver?)", ErrProgramFailed, card.FME.HostPath, err)
	}
	if v != dflAPIVersion {
		return fmt.Errorf("%w: FME %s reports DFL API version %d, this driver speaks version %d", ErrProgramFailed, card.FME.HostPath, v, dflAPIVersion)
	}

	arg := dflFMEPortPRArg{
		Argsz:         uint32(unsafe.Sizeof(dflFMEPortPRArg{})),
		PortID:        portID,
		BufferSize:    uint32(len(payload)),
		BufferAddress: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(payload)))),
	}
	err = ioctl(fd, dflFMEPortPR, unsafe.Pointer(&arg))
	// The kernel reads payload through BufferAddress, which the garbage
	// collector does not see: keep payload alive until the ioctl returned.
	runtime.KeepAlive(payload)
	if err != nil {
		return prError("DFL", "DFL_FPGA_FME_PORT_PR", card, portID, arg.BufferSize, uintptr(arg.Argsz), err, "")
	}
	return nil
}
