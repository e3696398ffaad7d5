package program

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// The test binary doubles as a stand-in XRT tool: run through a symlink
// named xrt-smi or xbutil it acts as the tool (fakeXRTTool), and run as
// fakeSleeper it is a child process the tool leaves behind.
const fakeSleeper = "fake-xrt-sleeper"

func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "xrt-smi", "xbutil":
		os.Exit(fakeXRTTool())
	case fakeSleeper:
		time.Sleep(time.Hour) // hangs until killed
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeXRTConfig tells the stand-in tool what to do. It lives beside the
// tool, in fake-xrt.json.
type fakeXRTConfig struct {
	// Mode: "" loads the xclbin (writes its UUID into UUIDFile); "fail"
	// prints 20 lines and exits 3; "hang" starts a child, says so through
	// the FIFO Ready (when set) and hangs; "stale" exits 0 without loading;
	// "unload" empties UUIDFile and exits 0; "mutate" rewrites the file
	// Mutate and tries to write the xclbin it was given, then loads.
	Mode     string
	UUIDFile string
	// Record is the directory the tool records into: argv.json, the sha256
	// of the xclbin it read (payload.sha256), its child's pid (child.pid),
	// and what writing the xclbin gave (write.err).
	Record string
	Mutate string
	Ready  string
}

// fakeXRTTool is the stand-in tool's main.
func fakeXRTTool() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "ERROR: fake XRT tool:", err)
		return 1
	}
	var cfg fakeXRTConfig
	b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Args[0]), "fake-xrt.json"))
	if err != nil {
		return fail(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fail(err)
	}
	record := func(name string, data []byte) error {
		return writeSysfsFile(filepath.Join(cfg.Record, name), string(data))
	}
	argv, _ := json.Marshal(os.Args)
	if err := record("argv.json", argv); err != nil {
		return fail(err)
	}
	user := ""
	if i := slices.Index(os.Args, "--user"); i > 0 && i+1 < len(os.Args) {
		user = os.Args[i+1]
	}
	if cfg.Mode == "mutate" {
		if err := os.WriteFile(cfg.Mutate, []byte("rewritten after verification"), 0o644); err != nil {
			return fail(err)
		}
		werr := "nil"
		if f, err := os.OpenFile(user, os.O_WRONLY, 0); err != nil {
			werr = err.Error()
		} else {
			if _, err := f.WriteAt([]byte("evil"), 0); err != nil {
				werr = err.Error()
			}
			f.Close()
		}
		if err := record("write.err", []byte(werr)); err != nil {
			return fail(err)
		}
	}
	data, err := os.ReadFile(user)
	if err != nil {
		return fail(err)
	}
	if err := record("payload.sha256", []byte(sha256Hex(data))); err != nil {
		return fail(err)
	}
	switch cfg.Mode {
	case "fail":
		for i := 1; i <= 20; i++ {
			out := os.Stdout
			if i%2 == 0 {
				out = os.Stderr
			}
			fmt.Fprintf(out, "line %d\n", i)
		}
		return 3
	case "hang":
		child := &exec.Cmd{Path: "/proc/self/exe", Args: []string{fakeSleeper}}
		if err := child.Start(); err != nil {
			return fail(err)
		}
		if err := record("child.pid", []byte(strconv.Itoa(child.Process.Pid))); err != nil {
			return fail(err)
		}
		if cfg.Ready != "" {
			if err := os.WriteFile(cfg.Ready, []byte("ready"), 0); err != nil {
				return fail(err)
			}
		}
		time.Sleep(time.Hour) // hangs until killed
		return 0
	case "stale":
		fmt.Println("INFO: xrt-smi program succeeded")
		return 0
	case "unload":
		if err := writeSysfsFile(cfg.UUIDFile, ""); err != nil {
			return fail(err)
		}
		return 0
	}
	p, err := parseBytes(user, data, limits{}.withDefaults())
	if err != nil {
		return fail(err)
	}
	if err := writeSysfsFile(cfg.UUIDFile, dashedUUID(p.afuID)+"\n"); err != nil {
		return fail(err)
	}
	fmt.Println("INFO: xrt-smi program succeeded")
	return 0
}

// fakeXRT is a tool directory holding the stand-in under the given names.
type fakeXRT struct {
	dir string
	cfg fakeXRTConfig
}

func newFakeXRT(t *testing.T, card *discovery.Card, mode string, tools ...string) *fakeXRT {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeXRT{dir: t.TempDir(), cfg: fakeXRTConfig{Mode: mode, UUIDFile: card.Ports[0].AFUIDPath(), Record: t.TempDir()}}
	for _, name := range tools {
		if err := os.Symlink(exe, filepath.Join(f.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	f.configure(t)
	return f
}

// configure writes f.cfg for the tool to read.
func (f *fakeXRT) configure(t *testing.T) {
	t.Helper()
	b, err := json.Marshal(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, f.dir, "fake-xrt.json", b)
}

func (f *fakeXRT) programmer(t *testing.T, kind string, cfg XRTConfig) Programmer {
	t.Helper()
	cfg.ToolDir = f.dir
	p, err := NewProgrammer(kind, WithXRT(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recorded returns what the tool recorded under name; "" when it did not.
func (f *fakeXRT) recorded(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.cfg.Record, name))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (f *fakeXRT) argv(t *testing.T) []string {
	t.Helper()
	var argv []string
	if s := f.recorded(t, "argv.json"); s != "" {
		if err := json.Unmarshal([]byte(s), &argv); err != nil {
			t.Fatal(err)
		}
	}
	return argv
}

func TestXRTProgrammerLoads(t *testing.T) {
	for _, kind := range []string{KindXRT, KindAuto} {
		t.Run(kind, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			card := xrtTestCard(t, testXIf, testXclbin2)
			f := newFakeXRT(t, card, "", "xrt-smi", "xbutil")
			data := xclbinFile(t, testXIf, testXclbin, 4096)
			bs := openTestBitstream(t, data)

			res, err := Load(ctx, f.programmer(t, kind, XRTConfig{}), card, card.Ports[0], bs, LoadOptions{SHA256: sha256Hex(data)})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{filepath.Join(f.dir, "xrt-smi"), "program", "--device", testUserPF, "--user", "/proc/self/fd/3"}
			if got := f.argv(t); !slices.Equal(got, want) {
				t.Errorf("argv = %q, want %q", got, want)
			}
			if got := f.recorded(t, "payload.sha256"); got != sha256Hex(data) {
				t.Errorf("the tool read bytes with sha256 %s, want the verified file's %s", got, sha256Hex(data))
			}
			if got := readAFUIDFile(t, card.Ports[0]); got != testXclbinDsh+"\n" {
				t.Errorf("xclbinuuid = %q", got)
			}
			if res.Programmer != "xrt" || res.PayloadBytes != int64(len(data)) {
				t.Errorf("Result = %+v", res)
			}
		})
	}
}

func TestXRTProgrammerFallsBackToXbutil(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, "")
	f := newFakeXRT(t, card, "", "xbutil")
	bs := openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64))
	if _, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], bs, LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(f.dir, "xbutil"), "program", "--device", testUserPF, "--user", "/proc/self/fd/3"}
	if got := f.argv(t); !slices.Equal(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}
}

func TestXRTProgrammerWithoutTool(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, "")
	f := newFakeXRT(t, card, "")
	_, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64)), LoadOptions{})
	wantErr(t, err, "no XRT tool to load the xclbin with", filepath.Join(f.dir, "xrt-smi"), filepath.Join(f.dir, "xbutil"), "install XRT on the host")
	if !errors.Is(err, ErrProgramFailed) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %q does not match ErrProgramFailed and ErrNotExist", err)
	}
}

func TestXRTProgrammerReportsToolFailure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, testXclbin2)
	f := newFakeXRT(t, card, "fail", "xrt-smi")
	_, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64)), LoadOptions{})
	wantErr(t, err, filepath.Join(f.dir, "xrt-smi")+" program --device "+testUserPF+" failed with exit status 3",
		`its output ending "line 13 | line 14 | line 15 | line 16 | line 17 | line 18 | line 19 | line 20"`)
	if !errors.Is(err, ErrProgramFailed) {
		t.Errorf("error %q does not match ErrProgramFailed", err)
	}
	if got := readAFUIDFile(t, card.Ports[0]); got != dashedUUID(testXclbin2)+"\n" {
		t.Errorf("xclbinuuid changed to %q", got)
	}
}

func TestXRTProgrammerTimeout(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, "")
	f := newFakeXRT(t, card, "hang", "xrt-smi")
	p := f.programmer(t, KindXRT, XRTConfig{Timeout: 300 * time.Millisecond})
	_, err := Load(ctx, p, card, card.Ports[0], openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64)), LoadOptions{})
	wantErr(t, err, "xrt-smi program --device "+testUserPF+" did not finish within 300ms and was killed with every process it started")
	if !errors.Is(err, ErrProgramFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q does not match ErrProgramFailed and DeadlineExceeded", err)
	}
	// When the tool got as far as starting its child, the child died too.
	if pid := f.recorded(t, "child.pid"); pid != "" {
		waitGone(t, pid)
	}
}

// TestXRTProgrammerCancelKillsChildren gives up on a hung tool once it has
// started a child: the tool and its child are killed.
func TestXRTProgrammerCancelKillsChildren(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	card := xrtTestCard(t, testXIf, "")
	f := newFakeXRT(t, card, "hang", "xrt-smi")
	f.cfg.Ready = filepath.Join(t.TempDir(), "ready")
	if err := syscall.Mkfifo(f.cfg.Ready, 0o600); err != nil {
		t.Fatal(err)
	}
	f.configure(t)
	bs := openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64))

	ready := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(f.cfg.Ready)
		if err == nil && string(b) != "ready" {
			err = fmt.Errorf("read %q from the FIFO", b)
		}
		ready <- err
	}()
	loaded := make(chan error, 1)
	go func() {
		_, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], bs, LoadOptions{})
		loaded <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case err := <-loaded:
		t.Fatalf("Load ended before the tool was hanging: %v", err)
	}
	cancel()
	err := <-loaded
	wantErr(t, err, "xrt-smi program --device "+testUserPF+" was given up after", "killed with every process it started")
	// Stopped by its caller: no fault of the device.
	if errors.Is(err, ErrProgramFailed) || !errors.Is(err, context.Canceled) {
		t.Errorf("error %q matches ErrProgramFailed or not Canceled", err)
	}
	waitGone(t, f.recorded(t, "child.pid"))
}

// waitGone waits, at most 30 s, until the process pid has exited.
func waitGone(t *testing.T, pid string) {
	t.Helper()
	n, err := strconv.Atoi(pid)
	if err != nil {
		t.Fatalf("child pid %q: %v", pid, err)
	}
	fd, err := unix.PidfdOpen(n, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for {
		ready, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if ready == 0 {
			t.Fatalf("the tool's child %d still runs 30s after the tool was killed", n)
		}
		return
	}
}

// TestXRTVerifyCatchesAToolThatDidNotLoad: the tool exits 0 (XRT's wrapper
// does so even on failure when installed under /usr) but the card shows the
// old xclbin, or none.
func TestXRTVerifyCatchesAToolThatDidNotLoad(t *testing.T) {
	for mode, want := range map[string]string{
		"stale":  "port fpga-0000-3b-00-1-p0 reports xclbin " + testXclbin2 + " after programming",
		"unload": "xclbinuuid of port fpga-0000-3b-00-1-p0 still empty",
	} {
		t.Run(mode, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			card := xrtTestCard(t, testXIf, testXclbin2)
			f := newFakeXRT(t, card, mode, "xrt-smi")
			bs := openTestBitstream(t, xclbinFile(t, testXIf, testXclbin, 64))
			_, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], bs, LoadOptions{VerifyTimeout: 1})
			wantErr(t, err, want)
			if !errors.Is(err, ErrVerifyFailed) {
				t.Errorf("error %q does not match ErrVerifyFailed", err)
			}
		})
	}
}

// TestXRTToolReadsVerifiedBytes rewrites the repository file once Load has
// verified it: the tool still reads the verified bytes, and cannot change
// them either.
func TestXRTToolReadsVerifiedBytes(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, "")
	data := xclbinFile(t, testXIf, testXclbin, 4096)
	bs := openTestBitstream(t, data)
	f := newFakeXRT(t, card, "mutate", "xrt-smi")
	f.cfg.Mutate = bs.Path
	f.configure(t)

	if _, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{}), card, card.Ports[0], bs, LoadOptions{SHA256: sha256Hex(data)}); err != nil {
		t.Fatal(err)
	}
	if now, err := os.ReadFile(bs.Path); err != nil || string(now) != "rewritten after verification" {
		t.Fatalf("the file was not rewritten: %q, %v", now, err)
	}
	if got := f.recorded(t, "payload.sha256"); got != sha256Hex(data) {
		t.Errorf("the tool read bytes with sha256 %s, want the verified %s", got, sha256Hex(data))
	}
	if got := f.recorded(t, "write.err"); got == "nil" || got == "" {
		t.Errorf("the tool could write the xclbin it was given (%q)", got)
	}
	if got := readAFUIDFile(t, card.Ports[0]); got != testXclbinDsh+"\n" {
		t.Errorf("xclbinuuid = %q", got)
	}
}

// TestXRTProgrammerChroot runs the tool chrooted to a host root: "/" works
// like no root at all (chroot needs CAP_SYS_CHROOT); a root without /proc is
// refused before the tool runs.
func TestXRTProgrammerChroot(t *testing.T) {
	t.Run("host root /", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chroot needs root")
		}
		_, ctx := ktesting.NewTestContext(t)
		card := xrtTestCard(t, testXIf, "")
		f := newFakeXRT(t, card, "", "xrt-smi")
		data := xclbinFile(t, testXIf, testXclbin, 64)
		if _, err := Load(ctx, f.programmer(t, KindXRT, XRTConfig{HostRoot: "/"}), card, card.Ports[0], openTestBitstream(t, data), LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := f.recorded(t, "payload.sha256"); got != sha256Hex(data) {
			t.Errorf("the tool read bytes with sha256 %s, want %s", got, sha256Hex(data))
		}
	})
	t.Run("root without /proc", func(t *testing.T) {
		root := t.TempDir()
		writeFile(t, root, "opt/xilinx/xrt/bin/xrt-smi", []byte("#!/bin/sh\nexit 0\n"))
		if err := os.Chmod(filepath.Join(root, "opt/xilinx/xrt/bin/xrt-smi"), 0o755); err != nil {
			t.Fatal(err)
		}
		card := xrtTestCard(t, testXIf, "")
		p, err := NewProgrammer(KindXRT, WithXRT(XRTConfig{HostRoot: root}))
		if err != nil {
			t.Fatal(err)
		}
		err = p.Program(context.Background(), card, card.Ports[0], xclbinFile(t, testXIf, testXclbin, 64))
		wantErr(t, err, "runs chrooted to "+root+" but "+root+"/proc is not a mounted /proc", "mount the host's / at "+root)
		if !errors.Is(err, ErrProgramFailed) {
			t.Errorf("error %q does not match ErrProgramFailed", err)
		}
	})
}

// TestFindXRTToolResolvesInRoot: XRT installs /opt/xilinx/xrt as an
// absolute link to a versioned directory, which must resolve inside the
// host root; a tool that is not executable is passed over.
func TestFindXRTToolResolvesInRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "opt/xilinx/xrt-2.16.204/bin/xrt-smi", []byte("not executable"))
	writeFile(t, root, "opt/xilinx/xrt-2.16.204/bin/xbutil", []byte("#!/bin/sh\n"))
	if err := os.Chmod(filepath.Join(root, "opt/xilinx/xrt-2.16.204/bin/xbutil"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/opt/xilinx/xrt-2.16.204", filepath.Join(root, "opt/xilinx/xrt")); err != nil {
		t.Fatal(err)
	}
	got, err := findXRTTool(root, "/opt/xilinx/xrt/bin")
	if err != nil || got != "/opt/xilinx/xrt/bin/xbutil" {
		t.Fatalf("findXRTTool = %q, %v; want /opt/xilinx/xrt/bin/xbutil", got, err)
	}
	if err := os.Remove(filepath.Join(root, "opt/xilinx/xrt-2.16.204/bin/xbutil")); err != nil {
		t.Fatal(err)
	}
	_, err = findXRTTool(root, "/opt/xilinx/xrt/bin")
	wantErr(t, err, root+"/opt/xilinx/xrt/bin/xrt-smi (not executable)", root+"/opt/xilinx/xrt/bin/xbutil (no such file or directory)")
}

func TestXRTProgrammerRefusesArguments(t *testing.T) {
	xclbin := xclbinFile(t, testXIf, testXclbin, 64)
	badBDF := xrtTestCard(t, testXIf, "")
	badBDF.PCIAddress = "--force"
	intel := testCard(t, testIf, 1, testAFU)
	for name, tc := range map[string]struct {
		card    *discovery.Card
		payload []byte
		want    string
	}{
		"Intel card": {intel, xclbin, `card 0000:81:00.0 has kernel driver "dfl": the xrt programmer loads only cards driven by XRT`},
		"bad BDF":    {badBDF, xclbin, `card PCI address "--force" is not an extended BDF`},
		"GBS":        {xrtTestCard(t, testXIf, ""), gbsFile(t, testXIf, testXclbin, 64), "does not start with the xclbin magic"},
		"no card":    {nil, xclbin, "card and port are required"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeXRT(t, xrtTestCard(t, testXIf, ""), "", "xrt-smi")
			var port *discovery.Port
			if tc.card != nil {
				port = tc.card.Ports[0]
			}
			err := f.programmer(t, KindXRT, XRTConfig{}).Program(context.Background(), tc.card, port, tc.payload)
			wantErr(t, err, tc.want)
			if !errors.Is(err, ErrProgramFailed) {
				t.Errorf("error %q does not match ErrProgramFailed", err)
			}
			if argv := f.argv(t); argv != nil {
				t.Errorf("the tool ran: %q", argv)
			}
		})
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 8}
	for _, s := range []string{"abc", "defgh", "ij", "0123456789xy"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if string(b.b) != "456789xy" {
		t.Errorf("kept %q, want the last 8 bytes", b.b)
	}
	b = &tailBuffer{max: 8}
	b.Write([]byte("abcdef"))
	b.Write([]byte("ghij"))
	if string(b.b) != "cdefghij" {
		t.Errorf("kept %q, want cdefghij", b.b)
	}
	if got := (&tailBuffer{max: 8}).lastLines(); got != ", printing nothing" {
		t.Errorf("lastLines of nothing = %q", got)
	}
}

// TestXRTRunsToolInHostRoot runs a static program chrooted to a host root
// of its own (chroot needs CAP_SYS_CHROOT): it is found and runs inside the
// root, in its root directory, with the fixed environment.
func TestXRTRunsToolInHostRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the tool with")
	}
	src := t.TempDir()
	writeFile(t, src, "go.mod", []byte("module hosttool\n\ngo 1.22\n"))
	writeFile(t, src, "main.go", []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	_, err := os.Stat("/host-marker")
	wd, _ := os.Getwd()
	fmt.Printf("argv=%q marker=%v cwd=%s env=%q\n", os.Args, err == nil, wd, os.Environ())
	os.Exit(4)
}
`))
	root := t.TempDir()
	writeFile(t, root, "host-marker", nil)
	build := exec.Command(gobin, "build", "-o", filepath.Join(root, "opt/xilinx/xrt/bin/xrt-smi"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the tool: %v\n%s", err, out)
	}
	memfd, err := sealedMemfd("xclbin", []byte(xclbinMagic))
	if err != nil {
		t.Fatal(err)
	}
	defer memfd.Close()
	tool, err := findXRTTool(root, DefaultXRTToolDir)
	if err != nil {
		t.Fatal(err)
	}
	err = runTool(context.Background(), XRTConfig{HostRoot: root, Timeout: time.Minute},
		[]string{tool, "program", "--device", testUserPF, "--user", "/proc/self/fd/3"}, memfd)
	wantErr(t, err, "chroot "+root+" /opt/xilinx/xrt/bin/xrt-smi program --device "+testUserPF+" failed with exit status 4",
		`argv=[\"/opt/xilinx/xrt/bin/xrt-smi\" \"program\" \"--device\" \"`+testUserPF+`\" \"--user\" \"/proc/self/fd/3\"] marker=true cwd=/ env=[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\" \"LC_ALL=C\"]`,
		"`xrt-smi examine --device "+testUserPF+"`")
}
