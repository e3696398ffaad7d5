package program

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Linux ioctl request encoding, as the _IOC macros of asm-generic/ioctl.h
// compute it (x86, arm64, riscv; the architectures FPGA PCIe cards ship on):
// direction (2 bits) | argument size (14) | type (8) | number (8).
const (
	iocNRShift   = 0
	iocTypeShift = 8
	iocSizeShift = 16
	iocDirShift  = 30

	iocNone  = 0
	iocWrite = 1
)

func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<iocDirShift | size<<iocSizeShift | typ<<iocTypeShift | nr<<iocNRShift
}

// ioNone is _IO(typ, nr).
func ioNone(typ, nr uintptr) uintptr { return ioc(iocNone, typ, nr, 0) }

// ioWrite is _IOW(typ, nr, size).
func ioWrite(typ, nr, size uintptr) uintptr { return ioc(iocWrite, typ, nr, size) }

// DFL uAPI (include/uapi/linux/fpga-dfl.h).
const (
	dflMagic      = 0xB6
	dflBase       = 0
	dflPortBase   = 0x40
	dflFMEBase    = 0x80
	dflAPIVersion = 0
)

// DFL request numbers. The driver issues GET_API_VERSION and FME_PORT_PR;
// the others complete the uAPI table and are checked by the tests.
var (
	dflGetAPIVersion     = ioNone(dflMagic, dflBase+0)
	dflCheckExtension    = ioNone(dflMagic, dflBase+1)
	dflPortReset         = ioNone(dflMagic, dflPortBase+0)
	dflPortGetInfo       = ioNone(dflMagic, dflPortBase+1)
	dflPortGetRegionInfo = ioNone(dflMagic, dflPortBase+2)
	dflFMEPortPR         = ioNone(dflMagic, dflFMEBase+0)
	dflFMEPortRelease    = ioWrite(dflMagic, dflFMEBase+1, unsafe.Sizeof(int32(0)))
	dflFMEPortAssign     = ioWrite(dflMagic, dflFMEBase+2, unsafe.Sizeof(int32(0)))
)

// dflFMEPortPRArg is struct dfl_fpga_fme_port_pr.
type dflFMEPortPRArg struct {
	Argsz         uint32
	Flags         uint32
	PortID        uint32
	BufferSize    uint32
	BufferAddress uint64
}

// dflPortInfo is struct dfl_fpga_port_info (DFL_FPGA_PORT_GET_INFO).
type dflPortInfo struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumUmsgs   uint32
}

// dflPortRegionInfo is struct dfl_fpga_port_region_info
// (DFL_FPGA_PORT_GET_REGION_INFO).
type dflPortRegionInfo struct {
	Argsz   uint32
	Flags   uint32
	Index   uint32
	Padding uint32
	Size    uint64
	Offset  uint64
}

// OPAE (out-of-tree intel-fpga driver) uAPI.
const (
	opaeMagic   = 0xB5
	opaeFMEBase = 0x80
)

// OPAE request numbers; the driver issues PORT_PR only.
var (
	opaeFMEPortPR      = ioNone(opaeMagic, opaeFMEBase+0)
	opaeFMEPortRelease = ioNone(opaeMagic, opaeFMEBase+1)
	opaeFMEPortAssign  = ioNone(opaeMagic, opaeFMEBase+2)
)

// opaeFMEPortPRArg is the OPAE driver's struct fpga_fme_port_pr; Status
// carries the hardware error bitmask when PR fails with EIO.
type opaeFMEPortPRArg struct {
	Argsz         uint32
	Flags         uint32
	PortID        uint32
	BufferSize    uint32
	BufferAddress uint64
	Status        uint64
}

// opaeFMEPortAssignArg is the argument of the OPAE port release and assign
// ioctls.
type opaeFMEPortAssignArg struct {
	Argsz  uint32
	Flags  uint32
	PortID uint32
}

// ioctl issues a pointer-argument ioctl. arg is converted to uintptr inside
// the Syscall call expression, which keeps what it points to alive.
func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// prArgs checks the arguments both kernels check, so that the caller gets a
// clear error rather than EINVAL, and pads the payload to a multiple of 4.
func prArgs(card *discovery.Card, port *discovery.Port, payload []byte) ([]byte, uint32, error) {
	switch {
	case card == nil || port == nil:
		return nil, 0, fmt.Errorf("%w: card and port are required", ErrProgramFailed)
	case card.FME.HostPath == "":
		return nil, 0, fmt.Errorf("%w: card %s has no FME device node to program through", ErrProgramFailed, card.PCIAddress)
	case port.ID < 0 || (card.PortsNum > 0 && port.ID >= card.PortsNum):
		return nil, 0, fmt.Errorf("%w: port id %d of %s is outside 0..%d (ports_num %d of FME %s)", ErrProgramFailed, port.ID, port.Node.Name, card.PortsNum-1, card.PortsNum, card.FME.HostPath)
	case len(payload) == 0:
		return nil, 0, fmt.Errorf("%w: bitstream payload is empty", ErrProgramFailed)
	case len(payload) > math.MaxUint32-3:
		return nil, 0, fmt.Errorf("%w: bitstream payload of %d bytes does not fit the 32-bit buffer_size", ErrProgramFailed, len(payload))
	}
	return padTo4(payload), uint32(port.ID), nil
}

// openFME opens the card's FME node for PR.
func openFME(card *discovery.Card) (int, error) {
	fd, err := unix.Open(card.FME.HostPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.EBUSY):
		return -1, fmt.Errorf("%w: FME %s is held open by another process (older kernels allow one open): stop the other user (an OPAE tool or another driver) and retry: %w", ErrProgramFailed, card.FME.HostPath, err)
	case err != nil && fmeChanged(card):
		// The node is gone because the card is: removed or enumerated
		// anew since discovery (sameFME's case, before it could look).
		return -1, fmt.Errorf("%w: open FME %s: %w: card %s was removed or re-enumerated since discovery; retry", ErrDevicesChanged, card.FME.HostPath, err, card.PCIAddress)
	case err != nil:
		return -1, fmt.Errorf("%w: open FME %s: %w", ErrProgramFailed, card.FME.HostPath, err)
	}
	if err := sameFME(fd, card); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// sameFME checks that fd, opened by name, is the FME discovery found for
// card: node names and minors are reused when cards are re-enumerated, so
// the descriptor's device must be the one discovery saw and the one the
// card's FME directory in sysfs (below the card's PCI function) shows now.
// Opening first and checking after means a later renumbering cannot
// redirect the descriptor.
func sameFME(fd int, card *discovery.Card) error {
	if card.FME.Major == 0 && card.FME.Minor == 0 && card.FME.SysfsPath == "" {
		return nil // not from discovery
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: stat FME %s: %w", ErrProgramFailed, card.FME.HostPath, err)
	}
	got := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	want := fmeDevSeen(card)
	now, err := fmeDevNow(card)
	if err != nil {
		return fmt.Errorf("%w: card %s's FME %s is gone (%v): the card was removed or re-enumerated since discovery; retry", ErrDevicesChanged, card.PCIAddress, card.FME.SysfsPath, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || got != want || got != now {
		return fmt.Errorf("%w: %s is device %s, card %s's FME was %s at discovery and is %s now: the cards were re-enumerated; retry",
			ErrDevicesChanged, card.FME.HostPath, got, card.PCIAddress, want, now)
	}
	return nil
}

// fmeChanged reports whether the card's FME, as sysfs shows it now, is
// gone or another device than discovery saw.
func fmeChanged(card *discovery.Card) bool {
	now, err := fmeDevNow(card)
	return err != nil || now != fmeDevSeen(card)
}

// fmeDevSeen is the device number ("major:minor") discovery saw for the
// card's FME.
func fmeDevSeen(card *discovery.Card) string {
	return fmt.Sprintf("%d:%d", card.FME.Major, card.FME.Minor)
}

// fmeDevNow is the device number ("major:minor") the card's FME directory
// in sysfs shows now; discovery's when the card has no such directory
// (not from discovery).
func fmeDevNow(card *discovery.Card) (string, error) {
	if card.FME.SysfsPath == "" {
		return fmeDevSeen(card), nil
	}
	b, err := os.ReadFile(filepath.Join(card.FME.SysfsPath, "dev"))
	return strings.TrimSpace(string(b)), err
}

// fmeLocks serialises PR per FME: older kernels do not serialise two ports
// of one card themselves.
type fmeLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// processFMELocks is shared by every kernel backend NewProgrammer returns,
// so that the limit holds for the whole process, whichever Programmer
// value issues the PR.
var processFMELocks fmeLocks

// lock waits, as long as ctx allows, until no other PR runs on fme, and
// returns the function that releases it.
func (l *fmeLocks) lock(ctx context.Context, fme string) (func(), error) {
	l.mu.Lock()
	if l.held == nil {
		l.held = map[string]chan struct{}{}
	}
	ch, ok := l.held[fme]
	if !ok {
		ch = make(chan struct{}, 1)
		l.held[fme] = ch
	}
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: FME %s: %w", ErrProgramFailed, fme, err)
	}
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: gave up waiting for FME %s, busy programming another port: %w", ErrProgramFailed, fme, ctx.Err())
	}
}

// prError explains an errno from a PORT_PR ioctl. hwStatus describes the
// hardware status on EIO when the driver reports one.
func prError(driver, request string, card *discovery.Card, portID, bufferSize uint32, argsz uintptr, errno error, hwStatus string) error {
	fme := card.FME.HostPath
	switch {
	case errors.Is(errno, unix.EIO):
		return fmt.Errorf("%w: %s on FME %s, port %d: hardware reported a partial-reconfiguration error%s: check the FME error registers in sysfs and that the bitstream matches the card's FIM: %w",
			ErrProgramFailed, request, fme, portID, hwStatus, errno)
	case errors.Is(errno, unix.EINVAL):
		return fmt.Errorf("%w: %s on FME %s: the %s driver rejected the arguments argsz %d, flags 0, port_id %d, buffer_size %d: it requires argsz >= %d, flags 0, port_id below ports_num (%d) and, on older kernels, buffer_size a multiple of 4: %w",
			ErrProgramFailed, request, fme, driver, argsz, portID, bufferSize, argsz, card.PortsNum, errno)
	case errors.Is(errno, unix.ENOTTY):
		return fmt.Errorf("%w: %s on FME %s: the device does not know the request: it is not an FME node of the %s driver (is --programmer right for this kernel driver?): %w",
			ErrProgramFailed, request, fme, driver, errno)
	}
	return fmt.Errorf("%w: %s on FME %s, port %d: %w", ErrProgramFailed, request, fme, portID, errno)
}

// withFME runs a backend's PR ioctl: it checks and pads the arguments,
// takes the card's FME lock (as long as ctx allows), opens the FME node
// O_RDWR and hands do the descriptor, the port id and the padded payload.
func (l *fmeLocks) withFME(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte, do func(fd int, portID uint32, payload []byte) error) error {
	payload, portID, err := prArgs(card, port, payload)
	if err != nil {
		return err
	}
	unlock, err := l.lock(ctx, card.FME.HostPath)
	if err != nil {
		return err
	}
	defer unlock()
	fd, err := openFME(card)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return do(fd, portID, payload)
}
