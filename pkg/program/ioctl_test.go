package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// TestIoctlNumbers checks the computed request numbers against the values
// of the uAPI headers.
func TestIoctlNumbers(t *testing.T) {
	for name, tc := range map[string]struct{ got, want uintptr }{
		"DFL_FPGA_GET_API_VERSION":      {dflGetAPIVersion, 0xB600},
		"DFL_FPGA_CHECK_EXTENSION":      {dflCheckExtension, 0xB601},
		"DFL_FPGA_PORT_RESET":           {dflPortReset, 0xB640},
		"DFL_FPGA_PORT_GET_INFO":        {dflPortGetInfo, 0xB641},
		"DFL_FPGA_PORT_GET_REGION_INFO": {dflPortGetRegionInfo, 0xB642},
		"DFL_FPGA_FME_PORT_PR":          {dflFMEPortPR, 0xB680},
		"DFL_FPGA_FME_PORT_RELEASE":     {dflFMEPortRelease, 0x4004B681},
		"DFL_FPGA_FME_PORT_ASSIGN":      {dflFMEPortAssign, 0x4004B682},
		"FPGA_FME_PORT_PR (OPAE)":       {opaeFMEPortPR, 0xB580},
		"FPGA_FME_PORT_RELEASE (OPAE)":  {opaeFMEPortRelease, 0xB581},
		"FPGA_FME_PORT_ASSIGN (OPAE)":   {opaeFMEPortAssign, 0xB582},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#x, want %#x", name, tc.got, tc.want)
		}
	}
}

func TestIoctlStructLayout(t *testing.T) {
	for name, tc := range map[string]struct{ got, want uintptr }{
		"dfl_fpga_fme_port_pr":        {unsafe.Sizeof(dflFMEPortPRArg{}), 24},
		"dfl_fpga_port_info":          {unsafe.Sizeof(dflPortInfo{}), 16},
		"dfl_fpga_port_region_info":   {unsafe.Sizeof(dflPortRegionInfo{}), 32},
		"OPAE fpga_fme_port_pr":       {unsafe.Sizeof(opaeFMEPortPRArg{}), 32},
		"OPAE fpga_fme_port_assign":   {unsafe.Sizeof(opaeFMEPortAssignArg{}), 12},
		"port_pr buffer_address at":   {unsafe.Offsetof(dflFMEPortPRArg{}.BufferAddress), 16},
		"OPAE buffer_address at":      {unsafe.Offsetof(opaeFMEPortPRArg{}.BufferAddress), 16},
		"OPAE status at":              {unsafe.Offsetof(opaeFMEPortPRArg{}.Status), 24},
		"region_info size at":         {unsafe.Offsetof(dflPortRegionInfo{}.Size), 16},
		"port_pr buffer_size at":      {unsafe.Offsetof(dflFMEPortPRArg{}.BufferSize), 12},
		"OPAE port_pr buffer_size at": {unsafe.Offsetof(opaeFMEPortPRArg{}.BufferSize), 12},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %d, want %d", name, tc.got, tc.want)
		}
	}
}

func TestFMELocks(t *testing.T) {
	var l fmeLocks
	unlockA, err := l.lock(context.Background(), "/dev/dfl-fme.0")
	if err != nil {
		t.Fatal(err)
	}
	// While held, another PR on the same FME waits: with a done context
	// the wait ends at once.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.lock(done, "/dev/dfl-fme.0"); !errors.Is(err, context.Canceled) {
		t.Fatalf("second lock of a held FME: got %v, want context.Canceled", err)
	}
	unlockB, err := l.lock(context.Background(), "/dev/dfl-fme.1")
	if err != nil {
		t.Fatalf("another FME: %v", err)
	}
	unlockB()
	acquired := make(chan func())
	go func() {
		u, _ := l.lock(context.Background(), "/dev/dfl-fme.0")
		acquired <- u
	}()
	unlockA()
	(<-acquired)()
}

func TestPRArgs(t *testing.T) {
	card := &discovery.Card{PCIAddress: "0000:81:00.0", PortsNum: 2, FME: discovery.DevNode{HostPath: "/dev/dfl-fme.0"}}
	port := &discovery.Port{ID: 1, Node: discovery.DevNode{Name: "dfl-port.1"}}
	p, id, err := prArgs(card, port, []byte{1, 2, 3, 4, 5})
	if err != nil || id != 1 || len(p) != 8 || p[4] != 5 || p[5] != 0 {
		t.Fatalf("prArgs = % x, %d, %v; want the payload padded to 8 bytes and port 1", p, id, err)
	}
	for name, tc := range map[string]struct {
		card    *discovery.Card
		port    *discovery.Port
		payload []byte
		want    string
	}{
		"no FME":       {&discovery.Card{PCIAddress: "0000:81:00.0"}, port, []byte{1}, "has no FME device node"},
		"port id":      {card, &discovery.Port{ID: 2, Node: discovery.DevNode{Name: "dfl-port.2"}}, []byte{1}, "port id 2 of dfl-port.2 is outside 0..1"},
		"empty":        {card, port, nil, "payload is empty"},
		"missing port": {card, nil, []byte{1}, "card and port are required"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := prArgs(tc.card, tc.port, tc.payload)
			wantErr(t, err, tc.want)
			if !errors.Is(err, ErrProgramFailed) {
				t.Errorf("error %q does not match ErrProgramFailed", err)
			}
		})
	}
}

// TestKernelBackendsOnNonFMENodes runs the real backends against a missing
// node and a regular file, which answers every ioctl with ENOTTY.
func TestKernelBackendsOnNonFMENodes(t *testing.T) {
	dir := t.TempDir()
	regular := writeFile(t, dir, "dfl-fme.0", []byte("not a device"))
	payload := []byte{1, 2, 3, 4}
	port := &discovery.Port{ID: 0, Node: discovery.DevNode{Name: "dfl-port.0"}}
	for _, tc := range []struct {
		p    Programmer
		node string
		want string
	}{
		{&dflProgrammer{locks: &fmeLocks{}}, filepath.Join(dir, "missing"), "open FME"},
		{&dflProgrammer{locks: &fmeLocks{}}, regular, "DFL_FPGA_GET_API_VERSION on FME " + regular},
		{&opaeProgrammer{locks: &fmeLocks{}}, filepath.Join(dir, "missing"), "open FME"},
		{&opaeProgrammer{locks: &fmeLocks{}}, regular, "FPGA_FME_PORT_PR on FME " + regular + ": the device does not know the request: it is not an FME node of the OPAE driver"},
	} {
		t.Run(tc.p.Name()+" "+filepath.Base(tc.node), func(t *testing.T) {
			card := &discovery.Card{PortsNum: 1, FME: discovery.DevNode{HostPath: tc.node}}
			err := tc.p.Program(context.Background(), card, port, payload)
			wantErr(t, err, tc.want)
			if !errors.Is(err, ErrProgramFailed) {
				t.Errorf("error %q does not match ErrProgramFailed", err)
			}
		})
	}
}

func TestPRErrorExplainsErrno(t *testing.T) {
	card := &discovery.Card{PortsNum: 2, FME: discovery.DevNode{HostPath: "/dev/intel-fpga-fme.0"}}
	for errno, want := range map[unix.Errno]string{
		unix.EIO:    "hardware reported a partial-reconfiguration error (status 0x12)",
		unix.EINVAL: "the OPAE driver rejected the arguments argsz 32, flags 0, port_id 1, buffer_size 8: it requires argsz >= 32, flags 0, port_id below ports_num (2)",
		unix.EPERM:  "FPGA_FME_PORT_PR on FME /dev/intel-fpga-fme.0, port 1",
	} {
		err := prError("OPAE", "FPGA_FME_PORT_PR", card, 1, 8, 32, errno, " (status 0x12)")
		wantErr(t, err, want)
		if !errors.Is(err, errno) || !errors.Is(err, ErrProgramFailed) {
			t.Errorf("error %q does not match %v and ErrProgramFailed", err, errno)
		}
	}
}

// TestPRGoesToTheCardsFME: the PR ioctl is issued only on a descriptor of
// the device discovery found as the card's FME and that the card's FME
// directory in sysfs still shows: after the cards were enumerated anew,
// the node's path holds another card's FME (or the card's FME has another
// number), and programming is refused rather than sent to another card's
// region. /dev/null (1:3) stands in for an FME node.
func TestPRGoesToTheCardsFME(t *testing.T) {
	fmeDir := func(dev string) string {
		dir := t.TempDir()
		if dev != "" {
			if err := os.WriteFile(filepath.Join(dir, "dev"), []byte(dev+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, tc := range []struct {
		name         string
		major, minor uint32
		sysfs        string
		want         bool
	}{
		{"the same device", 1, 3, fmeDir("1:3"), true},
		{"another device at the path", 510, 0, fmeDir("510:0"), false},
		{"the card's FME renumbered", 1, 3, fmeDir("510:1"), false},
		{"the card's FME gone", 1, 3, fmeDir(""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			card := &discovery.Card{PCIAddress: "0000:01:00.0", PortsNum: 1,
				FME: discovery.DevNode{Name: "dfl-fme.0", Path: "/dev/dfl-fme.0", HostPath: "/dev/null", Major: tc.major, Minor: tc.minor, SysfsPath: tc.sysfs}}
			port := &discovery.Port{ID: 0, PCIAddress: "0000:01:00.0", Node: discovery.DevNode{Name: "dfl-port.0"}}
			var l fmeLocks
			called := false
			err := l.withFME(context.Background(), card, port, make([]byte, 8), func(int, uint32, []byte) error {
				called = true
				return nil
			})
			if called != tc.want || (err == nil) != tc.want {
				t.Fatalf("PR issued %v (%v), want %v", called, err, tc.want)
			}
			if !tc.want && !strings.Contains(err.Error(), card.PCIAddress) {
				t.Fatalf("error %v does not name the card", err)
			}
		})
	}
}
