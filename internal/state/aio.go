package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// directAlign is the alignment of O_DIRECT offsets, lengths and buffers:
// the largest logical block size in use (4 KiB), so it fits every disk.
const directAlign = 4096

// aioWriter writes a file durably (RWF_DSYNC) on an O_DIRECT descriptor,
// in one of two ways:
//   - submit and wait: through Linux native AIO, so that the disk's flush
//     runs in the kernel while the caller does other work, without a
//     thread handing the write over. The kernel signals the write's end
//     on an eventfd that the Go runtime's poller watches: a caller waiting
//     for it parks its goroutine, not a thread with its P. (Blocked in
//     io_getevents, a waiter held its P until the runtime took it back:
//     with two CPUs, half of them, for much of every flush.)
//   - write: synchronously (pwritev2), for a caller with nothing to do
//     meanwhile. The kernel ends a durable asynchronous write, and flushes
//     the disk, in a worker thread of its own, which waits for a CPU like
//     any other thread: on a node whose CPUs are busy, for longer than the
//     disk takes (eight callers sending claim after claim on two CPUs
//     waited 0.4 ms for a flush the disk did in 0.13 ms). A synchronous
//     write is ended in the writing thread, as soon as the disk answers:
//     0.15 ms there. It blocks that thread, and its P until the runtime
//     takes it back, as io_getevents did: the callers of such a write
//     have nothing to run meanwhile.
//
// One write is in flight at a time; the writer is not safe for concurrent
// use.
type aioWriter struct {
	fd  int
	ctx uint64 // aio_context_t
	// done is the eventfd the kernel signals when a write ends, opened
	// non-blocking so that reads park in the runtime's poller; doneFD is
	// its descriptor (done.Fd would make it blocking).
	done   *os.File
	doneFD int
	// buf and cb belong to the kernel while a write is in flight: from
	// submit until wait has taken its event (busy).
	buf  []byte
	cb   iocb
	want int64
	busy bool
}

// iocb is struct iocb of <linux/aio_abi.h> (64-bit little endian); the
// blank fields are the ones this writer leaves zero.
type iocb struct {
	_       uint64 // aio_data
	_       uint32 // aio_key
	rwFlags int32
	opcode  uint16
	_       int16 // aio_reqprio
	fd      uint32
	buf     uint64
	nbytes  uint64
	offset  int64
	_       uint64 // aio_reserved2
	flags   uint32 // aio_flags
	resfd   uint32 // aio_resfd
}

// ioEvent is struct io_event of <linux/aio_abi.h>.
type ioEvent struct {
	_   uint64 // data
	_   uint64 // obj
	res int64
	_   int64 // res2
}

const (
	iocbCmdPwrite = 1
	rwfDSync      = 0x2 // RWF_DSYNC
	iocbFlagResFD = 0x1 // IOCB_FLAG_RESFD: signal aio_resfd at the end
)

// openAIO opens path for durable direct writes, synchronous (write) and
// asynchronous (submit and wait). It fails where the kernel, the file
// system (tmpfs has no O_DIRECT) or a seccomp profile does not allow
// them; the caller then writes synchronously.
func openAIO(path string) (*aioWriter, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	w := &aioWriter{fd: fd}
	if _, _, errno := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&w.ctx)), 0); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("io_setup: %w", errno)
	}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("eventfd: %w", err), w.close())
	}
	w.done, w.doneFD = os.NewFile(uintptr(efd), "checkpoint write events"), efd
	return w, nil
}

// fill copies b into the aligned buffer, padded with zeros to a multiple
// of directAlign, and returns its length. It fails while a submitted
// write is in flight: the kernel may still read the buffer.
func (w *aioWriter) fill(b []byte) (int, error) {
	if w.busy {
		return 0, errors.New("a submitted write is still in flight")
	}
	n := (len(b) + directAlign - 1) / directAlign * directAlign
	if cap(w.buf) < n {
		w.buf = alignedBuffer(n)
	}
	w.buf = w.buf[:n]
	clear(w.buf[copy(w.buf, b):])
	return n, nil
}

// write writes b at off (a multiple of directAlign), padded with zeros to a
// multiple of directAlign; it has reached the disk when write returns nil.
// No submitted write may be in flight (see fill).
func (w *aioWriter) write(b []byte, off int64) error {
	n, err := w.fill(b)
	if err != nil {
		return err
	}
	for {
		r, err := unix.Pwritev2(w.fd, [][]byte{w.buf}, off, unix.RWF_DSYNC)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("pwritev2: %w", err)
		case r != n:
			return fmt.Errorf("short write: %d of %d bytes", r, n)
		}
		return nil
	}
}

// submit starts writing b at off as write does; wait ends it.
func (w *aioWriter) submit(b []byte, off int64) error {
	n, err := w.fill(b)
	if err != nil {
		return err
	}
	w.cb = iocb{opcode: iocbCmdPwrite, rwFlags: rwfDSync, fd: uint32(w.fd), buf: uint64(uintptr(unsafe.Pointer(&w.buf[0]))), nbytes: uint64(n), offset: off, flags: iocbFlagResFD, resfd: uint32(w.doneFD)}
	w.want = int64(n)
	cbs := [1]*iocb{&w.cb}
	for {
		r, _, errno := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(w.ctx), 1, uintptr(unsafe.Pointer(&cbs[0])))
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN:
			continue
		case errno != 0:
			return fmt.Errorf("io_submit: %w", errno)
		case r != 1:
			return fmt.Errorf("io_submit took %d writes, not 1", r)
		}
		w.busy = true
		return nil
	}
}

// wait waits for the write submit started; it has reached the disk when
// wait returns nil.
func (w *aioWriter) wait() error {
	// The eventfd counts ended writes; reading it parks this goroutine
	// until the write ends. Should the read fail, io_getevents below
	// waits instead (blocking its thread): either way this write's own
	// event is taken, never left for the next wait to mistake for its.
	var count [8]byte
	_, _ = io.ReadFull(w.done, count[:])
	var ev ioEvent
	for {
		r, _, errno := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(w.ctx), 1, 1, uintptr(unsafe.Pointer(&ev)), 0, 0)
		runtime.KeepAlive(w)
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return fmt.Errorf("io_getevents: %w", errno)
		case r != 1:
			continue
		}
		w.busy = false
		switch {
		case ev.res < 0:
			return unix.Errno(-ev.res)
		case ev.res != w.want:
			return fmt.Errorf("short write: %d of %d bytes", ev.res, w.want)
		}
		return nil
	}
}

// close releases the AIO context and the descriptor, once a write in
// flight has ended (io_destroy waits for it).
func (w *aioWriter) close() error {
	_, _, errno := unix.Syscall(unix.SYS_IO_DESTROY, uintptr(w.ctx), 0, 0)
	err := unix.Close(w.fd)
	if w.done != nil {
		err = errors.Join(err, w.done.Close())
	}
	if errno != 0 {
		return errors.Join(fmt.Errorf("io_destroy: %w", errno), err)
	}
	return err
}

// alignedBuffer returns n bytes starting at a multiple of directAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)) % directAlign
	return b[skip : skip+n : skip+n]
}

// unsupported reports whether err says this way of writing cannot work
// here (as opposed to a failing disk): the caller falls back for good.
func unsupported(err error) bool {
	// os.ErrPermission matches EPERM (seccomp) and EACCES.
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, os.ErrPermission)
}

// The kernel's sizes of the structures.
var (
	_ = [1]struct{}{}[unsafe.Sizeof(iocb{})-64]
	_ = [1]struct{}{}[unsafe.Sizeof(ioEvent{})-32]
)
