package discovery

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Uevent is one kernel object event as the kernel broadcasts it on the
// NETLINK_KOBJECT_UEVENT socket: "ACTION@DEVPATH\0KEY=VALUE\0...".
type Uevent struct {
	Action    string // add, remove, change, bind, unbind, ...
	DevPath   string // below /sys
	Subsystem string
	Env       map[string]string
}

// maxUevent is the largest message the kernel sends (UEVENT_BUFFER_SIZE).
const maxUevent = 2048

// ParseUevent decodes one kernel uevent message. Messages from udev (which
// start with "libudev") and malformed messages are rejected.
func ParseUevent(msg []byte) (Uevent, error) {
	if bytes.HasPrefix(msg, []byte("libudev")) {
		return Uevent{}, fmt.Errorf("uevent: a udev message, not a kernel one")
	}
	if len(msg) > maxUevent {
		return Uevent{}, fmt.Errorf("uevent: %d bytes, more than the kernel's %d", len(msg), maxUevent)
	}
	fields := bytes.Split(bytes.TrimRight(msg, "\x00"), []byte{0})
	head := string(fields[0])
	action, devpath, ok := strings.Cut(head, "@")
	if !ok || action == "" || !strings.HasPrefix(devpath, "/") {
		return Uevent{}, fmt.Errorf("uevent: header %q is not ACTION@/DEVPATH", head)
	}
	ev := Uevent{Action: action, DevPath: devpath, Env: map[string]string{}}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(string(f), "=")
		if !ok || k == "" {
			return Uevent{}, fmt.Errorf("uevent: field %q is not KEY=VALUE", f)
		}
		ev.Env[k] = v
	}
	if a, ok := ev.Env["ACTION"]; ok && a != action {
		return Uevent{}, fmt.Errorf("uevent: header action %q disagrees with ACTION=%q", action, a)
	}
	ev.Subsystem = ev.Env["SUBSYSTEM"]
	return ev, nil
}

// Relevant reports whether the event can change what discovery finds: a
// device of the FPGA classes appearing or going, a PCI function with the
// processing-accelerator class (0x12) being added or removed (which takes
// its FPGA devices with it), or an event a registered family's
// UeventMatcher matches (the DFL and OPAE devices below an FPGA card).
func (e Uevent) Relevant() bool {
	switch e.Action {
	case "add", "remove", "bind", "unbind", "move", "change":
	default:
		return false
	}
	switch e.Subsystem {
	case "fpga_region", "fpga", "fpga_bridge", "fpga_manager":
		return true
	case "pci":
		if strings.HasPrefix(e.Env["PCI_CLASS"], "12") {
			return true
		}
	}
	for _, f := range Families() {
		if m, ok := f.(UeventMatcher); ok && m.MatchUevent(e) {
			return true
		}
	}
	return false
}

// UeventMatcher is implemented by a Family whose devices come and go with
// kernel events beyond those Relevant knows for every family.
type UeventMatcher interface {
	// MatchUevent reports whether e (an add, remove, bind, unbind, move
	// or change) can change the family's cards.
	MatchUevent(e Uevent) bool
}

// UeventSource yields kernel uevents, one datagram per read.
type UeventSource struct {
	f *os.File // non-blocking, so Close unblocks Read through the poller
}

// NewNetlinkUeventSource opens a NETLINK_KOBJECT_UEVENT socket bound to the
// kernel's broadcast group.
func NewNetlinkUeventSource() (*UeventSource, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("open uevent netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("bind uevent netlink socket: %w", err)
	}
	return &UeventSource{f: os.NewFile(uintptr(fd), "uevent-netlink")}, nil
}

// NewUeventSourceFD reads uevents from any datagram socket, for example one
// end of a socketpair that a test writes kernel-format messages into. The
// source owns fd.
func NewUeventSourceFD(fd int) (*UeventSource, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("uevent source: %w", err)
	}
	return &UeventSource{f: os.NewFile(uintptr(fd), "uevent")}, nil
}

// Read blocks for the next datagram and parses it. It fails once Close was
// called.
func (s *UeventSource) Read() (Uevent, error) {
	var buf [maxUevent + 1]byte
	n, err := s.f.Read(buf[:])
	if err != nil {
		return Uevent{}, fmt.Errorf("read uevent: %w", err)
	}
	return ParseUevent(buf[:n])
}

// Close unblocks Read and releases the socket.
func (s *UeventSource) Close() error { return s.f.Close() }

// ListenUnixUeventSource binds a unix datagram socket at path and reads
// kernel-format uevents sent to it: how a simulated node reports hot-plug
// (the kernel never sends uevents about a simulated tree). A stale socket
// file at path is replaced.
func ListenUnixUeventSource(path string) (*UeventSource, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("uevent socket %s: %w", path, err)
	}
	_ = os.Remove(path)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("bind uevent socket %s: %w", path, err)
	}
	return NewUeventSourceFD(fd)
}

// OpenUeventSource opens the source a --uevent-source flag names:
// "netlink" (the kernel), "unix:PATH" (a datagram socket, for simulated
// nodes) or "none".
func OpenUeventSource(spec string) (*UeventSource, error) {
	switch {
	case spec == "netlink" || spec == "":
		return NewNetlinkUeventSource()
	case spec == "none":
		return nil, nil
	case strings.HasPrefix(spec, "unix:") && len(spec) > len("unix:"):
		return ListenUnixUeventSource(strings.TrimPrefix(spec, "unix:"))
	}
	return nil, fmt.Errorf("uevent source %q is not netlink, unix:PATH or none", spec)
}
