package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func TestSimPayload(t *testing.T) {
	p, err := SimPayload("D8424DC4-A4A3-C413-F89E-433683F9040B", 18)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 20 {
		t.Errorf("len = %d, want 18 rounded up to 20", len(p))
	}
	if want := []byte{0xd8, 0x42, 0x4d, 0xc4, 0xa4, 0xa3, 0xc4, 0x13, 0xf8, 0x9e, 0x43, 0x36, 0x83, 0xf9, 0x04, 0x0b}; string(p[:16]) != string(want) {
		t.Errorf("payload starts % x, want the AFU ID bytes % x", p[:16], want)
	}
	if p, _ := SimPayload(testAFU, 0); len(p) != 16 {
		t.Errorf("len = %d, want at least the 16-byte AFU ID", len(p))
	}
	_, err = SimPayload("nope", 16)
	wantErr(t, err, "AFU ID")
}

func TestSimProgrammerWritesAFUIDAtomically(t *testing.T) {
	card := testCard(t, testIf, 1, testAFU2)
	port := card.Ports[0]
	payload, _ := SimPayload(testAFU, 64)
	s := &SimProgrammer{}
	if err := s.Program(context.Background(), card, port, payload); err != nil {
		t.Fatal(err)
	}
	if got := readAFUIDFile(t, port); got != testAFU+"\n" {
		t.Errorf("afu_id = %q, want %q (%%016llx%%016llx)", got, testAFU+"\n")
	}
	if id, err := port.ReadAFUID(); err != nil || id != testAFU {
		t.Errorf("ReadAFUID = %q, %v", id, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(port.AFUIDPath()))
	if len(entries) != 1 {
		t.Errorf("port directory holds %d entries, want afu_id only (no temporary file left)", len(entries))
	}
}

func TestSimProgrammerValidatesLikeTheKernel(t *testing.T) {
	card := testCard(t, testIf, 2, testAFU2)
	good, _ := SimPayload(testAFU, 64)
	for name, tc := range map[string]struct {
		port    int
		id      int
		payload []byte
		want    string
	}{
		"port id = ports_num": {port: 1, id: 2, payload: good, want: "port_id 2 is not below ports_num 2"},
		"negative port id":    {port: 0, id: -1, payload: good, want: "port_id -1"},
		"empty payload":       {payload: nil, want: "buffer_size 0 is not a positive multiple of 4"},
		"unaligned payload":   {payload: good[:63], want: "buffer_size 63 is not a positive multiple of 4"},
		"short payload":       {payload: good[:12], want: "shorter than the 16-byte AFU ID"},
	} {
		t.Run(name, func(t *testing.T) {
			port := *card.Ports[tc.port]
			port.ID = tc.id
			err := (&SimProgrammer{}).Program(context.Background(), card, &port, tc.payload)
			wantErr(t, err, tc.want)
			if !errors.Is(err, syscall.EINVAL) || !errors.Is(err, ErrProgramFailed) {
				t.Errorf("error %q does not match EINVAL and ErrProgramFailed", err)
			}
			if got := readAFUIDFile(t, &port); got != testAFU2+"\n" {
				t.Errorf("afu_id changed to %q", got)
			}
		})
	}
}

func TestSimProgrammerFailures(t *testing.T) {
	ctx := context.Background()
	card := testCard(t, testIf, 2, testAFU2)
	p0, p1 := card.Ports[0], card.Ports[1]
	payload, _ := SimPayload(testAFU, 64)
	s := &SimProgrammer{}
	s.FailNext(syscall.EIO)
	s.FailNext(syscall.ETIMEDOUT)
	for _, want := range []error{syscall.EIO, syscall.ETIMEDOUT, nil} {
		if err := s.Program(ctx, card, p0, payload); !errors.Is(err, want) || (want != nil && !errors.Is(err, ErrProgramFailed)) {
			t.Fatalf("got %v, want %v", err, want)
		}
	}
	s.FailPort(p1, syscall.EIO)
	for range 2 {
		if err := s.Program(ctx, card, p1, payload); !errors.Is(err, syscall.EIO) {
			t.Fatalf("failing port: got %v, want EIO", err)
		}
		if err := s.Program(ctx, card, p0, payload); err != nil {
			t.Fatalf("other port: %v", err)
		}
	}
	if got := readAFUIDFile(t, p1); got != testAFU2+"\n" {
		t.Errorf("failed port's afu_id changed to %q", got)
	}
	s.FailPort(p1, nil)
	if err := s.Program(ctx, card, p1, payload); err != nil {
		t.Fatalf("after clearing FailPort: %v", err)
	}
	if s.Calls(p0) != 5 || s.Calls(p1) != 3 || s.TotalCalls() != 8 {
		t.Errorf("calls p0 %d p1 %d total %d, want 5, 3, 8", s.Calls(p0), s.Calls(p1), s.TotalCalls())
	}
}

// TestSimProgrammerRecordsOverlaps programs one port twice at once, the
// caller bug Overlaps exists to catch.
func TestSimProgrammerRecordsOverlaps(t *testing.T) {
	card := testCard(t, testIf, 1, testAFU2)
	payload, _ := SimPayload(testAFU, 64)
	gate := make(chan struct{})
	started := make(chan struct{}, 2)
	s := &SimProgrammer{Gate: gate, OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Program(context.Background(), card, card.Ports[0], payload) }()
	}
	<-started
	<-started
	if s.Overlaps() != 1 || s.MaxConcurrent() != 2 {
		t.Errorf("Overlaps %d MaxConcurrent %d, want 1 and 2", s.Overlaps(), s.MaxConcurrent())
	}
	gate <- struct{}{}
	gate <- struct{}{}
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestSimProgrammerHonoursContext(t *testing.T) {
	card := testCard(t, testIf, 1, testAFU2)
	payload, _ := SimPayload(testAFU, 64)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, s := range map[string]*SimProgrammer{
		"delay": {Delay: 1 << 62},
		"gate":  {Gate: make(chan struct{})},
	} {
		t.Run(name, func(t *testing.T) {
			err := s.Program(ctx, card, card.Ports[0], payload)
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrProgramFailed) {
				t.Fatalf("got %v, want context.Canceled and ErrProgramFailed", err)
			}
			if got := readAFUIDFile(t, card.Ports[0]); got != testAFU2+"\n" {
				t.Errorf("afu_id changed to %q", got)
			}
		})
	}
}

// TestSimProgrammerXRT loads an xclbin on a simulated Alveo card: the
// xclbin's UUID lands dashed in xclbinuuid, atomically, and the Intel
// port_id and 4-byte checks do not apply.
func TestSimProgrammerXRT(t *testing.T) {
	card := xrtTestCard(t, testXIf, testXclbin2)
	port := *card.Ports[0]
	port.ID = 7 // beyond PortsNum: XRT has no port_id
	payload := xclbinOf(t, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, Signature: []byte("odd")}, []byte("bits"))
	if len(payload)%4 == 0 {
		t.Fatalf("fixture is %d bytes, want one the Intel check would refuse", len(payload))
	}
	s := &SimProgrammer{}
	if err := s.Program(context.Background(), card, &port, payload); err != nil {
		t.Fatal(err)
	}
	if got := readAFUIDFile(t, &port); got != testXclbinDsh+"\n" {
		t.Errorf("xclbinuuid = %q, want %q", got, testXclbinDsh+"\n")
	}
	if id, err := port.ReadAFUID(); err != nil || id != testXclbin {
		t.Errorf("ReadAFUID = %q, %v", id, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(port.AFUIDPath()))
	if len(entries) != 1 {
		t.Errorf("sysfs directory holds %d entries, want xclbinuuid only (no temporary file left)", len(entries))
	}
}

func TestSimProgrammerXRTValidatesLikeXocl(t *testing.T) {
	card := xrtTestCard(t, testXIf, testXclbin2)
	for name, tc := range map[string]struct {
		payload []byte
		want    string
	}{
		"GBS payload":     {gbsFile(t, testXIf, testXclbin, 64), `simulated xclbin payload: xclbin magic is "XeonFPGA"`},
		"empty payload":   {nil, "shorter than the 456-byte xclbin header"},
		"other interface": {xclbinFile(t, testIf, testXclbin, 64), "xclbin interface UUID " + testIf + " is not one of the card's (interface \"" + testXIf + "\")"},
	} {
		t.Run(name, func(t *testing.T) {
			err := (&SimProgrammer{}).Program(context.Background(), card, card.Ports[0], tc.payload)
			wantErr(t, err, "simulated xocl on "+testUserPF, tc.want)
			if !errors.Is(err, syscall.EINVAL) || !errors.Is(err, ErrProgramFailed) {
				t.Errorf("error %q does not match EINVAL and ErrProgramFailed", err)
			}
			if got := readAFUIDFile(t, card.Ports[0]); got != dashedUUID(testXclbin2)+"\n" {
				t.Errorf("xclbinuuid changed to %q", got)
			}
		})
	}
}

// TestSimProgrammerXRTKeepsControls: FailNext, FailPort, Gate and Overlaps
// work on XRT cards as on Intel ones.
func TestSimProgrammerXRTKeepsControls(t *testing.T) {
	ctx := context.Background()
	card := xrtTestCard(t, testXIf, "")
	port := card.Ports[0]
	payload := xclbinFile(t, testXIf, testXclbin, 64)
	s := &SimProgrammer{}
	s.FailNext(syscall.EIO)
	if err := s.Program(ctx, card, port, payload); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrProgramFailed) {
		t.Fatalf("FailNext: got %v, want EIO", err)
	}
	s.FailPort(port, syscall.ENODEV)
	if err := s.Program(ctx, card, port, payload); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("FailPort: got %v, want ENODEV", err)
	}
	if got := readAFUIDFile(t, port); got != "" {
		t.Errorf("failed loads wrote xclbinuuid %q", got)
	}
	s.FailPort(port, nil)

	gate := make(chan struct{})
	started := make(chan struct{}, 2)
	s.Gate = gate
	s.OnStart = func(*discovery.Card, *discovery.Port) { started <- struct{}{} }
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.Program(ctx, card, port, payload) }()
	}
	<-started
	<-started
	if s.Overlaps() != 1 || s.MaxConcurrent() != 2 {
		t.Errorf("Overlaps %d MaxConcurrent %d, want 1 and 2", s.Overlaps(), s.MaxConcurrent())
	}
	close(gate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if got := readAFUIDFile(t, port); got != testXclbinDsh+"\n" {
		t.Errorf("xclbinuuid = %q", got)
	}
	if s.Calls(port) != 4 {
		t.Errorf("Calls = %d, want 4", s.Calls(port))
	}
}

func TestWriteSimXclbinRepository(t *testing.T) {
	dir := t.TempDir()
	paths, err := WriteSimXclbinRepository(dir, testXIf, testPlatform, []string{testXclbin, testXclbin2})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, testXIf, testXclbin+".xclbin"), filepath.Join(dir, testXIf, testXclbin2+".xclbin")}
	if !slices.Equal(paths, want) {
		t.Fatalf("paths %q, want %q", paths, want)
	}
	r := newTestRepository(t, dir)
	card := xrtTestCard(t, testXIf, testXclbin2)
	_, ctx := ktesting.NewTestContext(t)
	for _, uuid := range []string{testXclbin, testXclbin2} {
		bs, err := r.Find(testXIf, uuid)
		if err != nil {
			t.Fatal(err)
		}
		if bs.Format != FormatXclbin || bs.Platform != testPlatform || bs.Xclbin.Mode != XclbinPR {
			t.Errorf("indexed %+v", bs)
		}
		// The simulated programmer loads every one of them.
		if _, err := Load(ctx, &SimProgrammer{}, card, card.Ports[0], bs, LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := readAFUIDFile(t, card.Ports[0]); got != dashedUUID(uuid)+"\n" {
			t.Errorf("xclbinuuid = %q after loading %s", got, uuid)
		}
	}
	_, err = WriteSimXclbinRepository(dir, testXIf, testPlatform, []string{"nope"})
	wantErr(t, err, "AFU ID", `"nope"`)
}

// TestSimProgrammerPerAFUDelayAndFailingDevices: Delays holds only the
// AFU it names (a context that ends cancels that wait, while another AFU
// loads at once), FailDevices fails only the ports it names.
func TestSimProgrammerPerAFUDelayAndFailingDevices(t *testing.T) {
	card := testCard(t, testIf, 2, testAFU2)
	p0, p1 := card.Ports[0], card.Ports[1]
	delays, err := ParseSimDelays(" " + testAFU + "=1h,")
	if err != nil {
		t.Fatal(err)
	}
	s := &SimProgrammer{Delays: delays, FailDevices: []string{p1.DeviceName()}}
	slow, _ := SimPayload(testAFU, 64)
	fast, _ := SimPayload(testAFU2, 64)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Program(ctx, card, p0, slow); !errors.Is(err, context.Canceled) {
		t.Fatalf("slow AFU with an ended context: got %v, want the hour's wait cancelled", err)
	}
	if err := s.Program(ctx, card, p0, fast); err != nil {
		t.Fatalf("an AFU without a delay: %v", err)
	}
	err = s.Program(context.Background(), card, p1, fast)
	if !errors.Is(err, ErrProgramFailed) {
		t.Fatalf("failing device: got %v, want ErrProgramFailed", err)
	}
	wantErr(t, err, "--sim-program-fail")
	if got := readAFUIDFile(t, p1); got != testAFU2+"\n" {
		t.Errorf("failed port's afu_id changed to %q", got)
	}
	for spec, want := range map[string]string{
		"nope":            "want AFUID=DURATION",
		"zz=1s":           "AFU ID",
		testAFU + "=soon": `"soon" is not a duration`,
		testAFU + "=-1s":  `"-1s" is not a duration`,
	} {
		_, err := ParseSimDelays(spec)
		wantErr(t, err, want)
	}
}

func FuzzParseSimDelays(f *testing.F) {
	f.Add(testAFU + "=90s," + testAFU2 + "=1m")
	f.Add("=,")
	f.Fuzz(func(t *testing.T, spec string) {
		delays, err := ParseSimDelays(spec)
		if err != nil {
			return
		}
		for id, d := range delays {
			if canon, err := discovery.CanonicalID(id); err != nil || canon != id || d < 0 {
				t.Fatalf("%q gave %q=%v", spec, id, d)
			}
		}
	})
}
