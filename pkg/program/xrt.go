package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Defaults for XRTConfig.
const (
	// DefaultXRTToolDir is where XRT installs xrt-smi and xbutil.
	DefaultXRTToolDir = "/opt/xilinx/xrt/bin"
	// DefaultXRTTimeout bounds one xclbin load. Loading takes seconds (the
	// download, clock scaling and memory calibration); a tool still running
	// after two minutes is hung.
	DefaultXRTTimeout = 2 * time.Minute
)

// xrtTools are the XRT command-line tools that can load an xclbin, in order
// of preference: xrt-smi replaced xbutil in XRT 2.17; both take
// "program --device <bdf> --user <file>".
var xrtTools = []string{"xrt-smi", "xbutil"}

// xrtEnv is the whole environment the tool runs with: XRT's wrapper scripts
// source its setup.sh for the rest, and the driver's own environment (that
// of a container image) means nothing on the host.
var xrtEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}

// xrtOutputTail is how much of the tool's output an error keeps: its last
// xrtOutputLines lines, from at most the last 16 KiB.
const (
	xrtOutputTail  = 16 << 10
	xrtOutputLines = 8
)

// xrtPayloadFD is the descriptor number the tool inherits the xclbin on.
const xrtPayloadFD = 3

// XRTConfig configures the XRT programmer. The zero value uses the defaults.
type XRTConfig struct {
	// ToolDir is the directory holding xrt-smi or xbutil, as a path on the
	// host (below HostRoot); DefaultXRTToolDir when empty.
	ToolDir string
	// HostRoot is where the host's root file system is mounted when the
	// driver runs in a container ("/host"): the tool then runs chrooted
	// there, with the host's libraries and XRT installation. Empty runs the
	// tool directly. HostRoot must show the host's /proc at HostRoot/proc.
	HostRoot string
	// Timeout bounds one load; the tool and every process it started are
	// killed when it passes. DefaultXRTTimeout when 0.
	Timeout time.Duration
}

// WithXRT configures the XRT programmer that kinds "xrt" and "auto" use.
func WithXRT(c XRTConfig) ProgrammerOption {
	return func(pc *programmerConfig) { pc.XRT = c }
}

// withDefaults fills in the defaults and checks c.
func (c XRTConfig) withDefaults() (XRTConfig, error) {
	if c.ToolDir == "" {
		c.ToolDir = DefaultXRTToolDir
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultXRTTimeout
	}
	switch {
	case !filepath.IsAbs(c.ToolDir):
		return c, fmt.Errorf("XRT tool directory %q is not an absolute path: give the host's XRT bin directory, such as %s", c.ToolDir, DefaultXRTToolDir)
	case c.HostRoot != "" && !filepath.IsAbs(c.HostRoot):
		return c, fmt.Errorf("XRT host root %q is not an absolute path: give the directory the host's / is mounted at, such as /host, or leave it empty", c.HostRoot)
	case c.Timeout < 0:
		return c, fmt.Errorf("XRT programming timeout %s is negative: give a positive duration such as %s", c.Timeout, DefaultXRTTimeout)
	}
	c.ToolDir = filepath.Clean(c.ToolDir)
	if c.HostRoot != "" {
		c.HostRoot = filepath.Clean(c.HostRoot)
	}
	return c, nil
}

// xrtProgrammer loads xclbins on Alveo cards through XRT's command-line
// tool, the interface XRT supports across releases (the xocl ioctl's
// argument changes between them).
type xrtProgrammer struct {
	cfg XRTConfig
}

func (x *xrtProgrammer) Name() string { return string(discovery.DriverXRT) }

// NewXRTProgrammer returns the programmer of the XRT family's cards,
// configured by c (see XRTConfig).
func NewXRTProgrammer(c XRTConfig) (Programmer, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return &xrtProgrammer{cfg: c}, nil
}

// bdfPattern is an extended PCI address as discovery reports it.
var bdfPattern = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Program runs `xrt-smi program --device <bdf> --user <xclbin>` (or xbutil
// when xrt-smi is absent) for card's user function, with payload, the whole
// xclbin file, as the xclbin.
//
// The tool reads payload from a sealed memfd it inherits as descriptor 3 and
// is given the name /proc/self/fd/3. So it reads exactly the bytes Load
// hashed and checked: there is no path anyone could swap or rewrite between
// the check and the load (a temporary file would need a directory only the
// driver can write, below HostRoot, and cleaning up after a crash), and the
// seals forbid writing the memfd, even to the tool. The name resolves
// through the tool's /proc, which is why HostRoot needs the host's /proc.
//
// The tool runs in its own process group with a fixed environment, chrooted
// to HostRoot when set, for at most the configured timeout or until ctx is
// done; then the whole group is killed. A failure's error carries the exit
// status and the last lines of the tool's output. Program does not check
// what was loaded: Load reads xclbinuuid back.
func (x *xrtProgrammer) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	switch {
	case card == nil || port == nil:
		return fmt.Errorf("%w: card and port are required", ErrProgramFailed)
	case card.Driver != discovery.DriverXRT:
		return fmt.Errorf("%w: card %s has kernel driver %q: the xrt programmer loads only cards driven by XRT; use programmer auto", ErrProgramFailed, card.PCIAddress, card.Driver)
	case !bdfPattern.MatchString(card.PCIAddress):
		return fmt.Errorf("%w: card PCI address %q is not an extended BDF such as 0000:3b:00.1: it cannot be handed to the XRT tool", ErrProgramFailed, card.PCIAddress)
	case len(payload) < len(xclbinMagic) || string(payload[:len(xclbinMagic)]) != xclbinMagic:
		return fmt.Errorf("%w: payload for card %s does not start with the xclbin magic %q: the xrt programmer loads whole xclbin files", ErrProgramFailed, card.PCIAddress, xclbinMagic)
	}
	tool, err := findXRTTool(x.cfg.HostRoot, x.cfg.ToolDir)
	if err != nil {
		return err
	}
	if x.cfg.HostRoot != "" {
		if _, err := os.Stat(filepath.Join(x.cfg.HostRoot, "proc/self/fd")); err != nil {
			return fmt.Errorf("%w: the XRT tool runs chrooted to %s but %s/proc is not a mounted /proc (%w): it could not open the xclbin as /proc/self/fd/%d; mount the host's / at %s recursively (rbind, as a hostPath volume is)",
				ErrProgramFailed, x.cfg.HostRoot, x.cfg.HostRoot, err, xrtPayloadFD, x.cfg.HostRoot)
		}
	}
	f, err := sealedMemfd("xclbin", payload)
	if err != nil {
		return fmt.Errorf("%w: card %s: %w", ErrProgramFailed, card.PCIAddress, err)
	}
	defer f.Close()
	argv := []string{tool, "program", "--device", card.PCIAddress, "--user", "/proc/self/fd/" + strconv.Itoa(xrtPayloadFD)}
	return runTool(ctx, x.cfg, argv, f)
}

// findXRTTool returns the path, as seen from root, of the first of
// xrtTools in dir. Symlinks are resolved as the tool sees them: inside root
// (XRT installs /opt/xilinx/xrt as a link to a versioned directory).
func findXRTTool(root, dir string) (string, error) {
	var tried []string
	for _, name := range xrtTools {
		p := filepath.Join(dir, name)
		err := statInRoot(root, p)
		if err == nil {
			return p, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", filepath.Join(root, p), err))
	}
	fix := "install XRT on the host or point the XRT tool directory (--xrt-tool-dir) at its bin directory"
	if root == "" {
		fix += "; when the driver runs in a container, mount the host's / into it and name the mount with --xrt-host-root (chart: kubeletPlugin.xrt.hostRoot=/host)"
	}
	return "", fmt.Errorf("%w: no XRT tool to load the xclbin with: tried %s: %s: %w",
		ErrProgramFailed, strings.Join(tried, ", "), fix, os.ErrNotExist)
}

// statInRoot checks that p, resolved with root as "/", is an executable
// regular file.
func statInRoot(root, p string) error {
	var st unix.Stat_t
	if root == "" {
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
	} else {
		rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(rfd)
		fd, err := unix.Openat2(rfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("not a regular file")
	}
	if st.Mode&0o111 == 0 {
		return errors.New("not executable")
	}
	return nil
}

// sealedMemfd returns a memfd holding data, sealed against any change.
func sealedMemfd(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write memfd: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal memfd: %w", err)
	}
	return f, nil
}

// runTool runs argv with payload as descriptor 3 and waits for it, for at
// most cfg.Timeout or until ctx is done, killing its process group then.
func runTool(ctx context.Context, cfg XRTConfig, argv []string, payload *os.File) error {
	out := &tailBuffer{max: xrtOutputTail}
	cmd := &exec.Cmd{
		Path:       argv[0],
		Args:       argv,
		Env:        xrtEnv,
		Dir:        "/",
		Stdout:     out,
		Stderr:     out,
		ExtraFiles: []*os.File{payload},
		// A grandchild that keeps the output pipe open must not hold Wait
		// up once the tool has gone.
		WaitDelay:   time.Second,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Chroot: cfg.HostRoot},
	}
	what := strings.Join(argv[:4], " ")
	if cfg.HostRoot != "" {
		what = "chroot " + cfg.HostRoot + " " + what
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %s not started: %w", ErrProgramFailed, what, err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: start %s: %w", ErrProgramFailed, what, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(cfg.Timeout)
	defer timer.Stop()
	var err error
	select {
	case err = <-done:
	case <-timer.C:
		killGroup(cmd)
		<-done
		return fmt.Errorf("%w: %s did not finish within %s and was killed with every process it started: the card or XRT is hung, or loading needs longer than the XRT timeout allows%s: %w",
			ErrProgramFailed, what, cfg.Timeout, out.lastLines(), context.DeadlineExceeded)
	case <-ctx.Done():
		killGroup(cmd)
		<-done
		return fmt.Errorf("%w: %s was given up after %s and killed with every process it started%s: %w",
			ErrProgramFailed, what, time.Since(start).Round(time.Millisecond), out.lastLines(), ctx.Err())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		return fmt.Errorf("%w: %s failed with %s%s: see the tool's message; `%s examine --device %s` shows the card's state",
			ErrProgramFailed, what, exit.ProcessState, out.lastLines(), filepath.Base(argv[0]), argv[3])
	}
	return fmt.Errorf("%w: %s: %w%s", ErrProgramFailed, what, err, out.lastLines())
}

// killGroup kills the process group cmd leads: the tool and every process
// it started that stayed in its group.
func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// tailBuffer keeps the last max bytes written to it. exec.Cmd writes to it
// from one goroutine at a time (Stdout and Stderr are the same writer).
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.b = append(t.b[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.b) + len(p) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	t.b = append(t.b, p...)
	return n, nil
}

// lastLines renders the last non-empty output lines for an error message,
// or "" when there was no output.
func (t *tailBuffer) lastLines() string {
	var lines []string
	for _, l := range strings.Split(string(t.b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ", printing nothing"
	}
	lines = lines[max(0, len(lines)-xrtOutputLines):]
	return fmt.Sprintf(", its output ending %q", strings.Join(lines, " | "))
}

// ErrNotLoaded: a card reports nothing loaded yet (an XRT card's empty
// xclbinuuid); see LoadedReader.
var ErrNotLoaded = errors.New("empty: no xclbin loaded")

// ReadXclbinUUID reads the xclbin UUID an XRT card's user function reports
// in xclbinuuid: one dashed UUID a line, one line per slot, nothing when no
// xclbin is loaded (the error then matches ErrNotLoaded). It returns want
// when any slot holds it, else the first slot's UUID. The read is not
// bounded: it blocks as long as the kernel does, so callers bound it (see
// verifyAFU, discovery.ReadBounded).
func ReadXclbinUUID(port *discovery.Port, want string) (string, error) {
	path := port.AFUIDPath()
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	slots := strings.Fields(string(data))
	if len(slots) == 0 {
		return "", fmt.Errorf("read %s: %w", path, ErrNotLoaded)
	}
	var first string
	for _, s := range slots {
		id, err := discovery.CanonicalID(s)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		if id == want {
			return id, nil
		}
		if first == "" {
			first = id
		}
	}
	return first, nil
}
