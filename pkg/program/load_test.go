package program

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func openTestBitstream(t testing.TB, data []byte) *Bitstream {
	t.Helper()
	b, err := Open(writeFile(t, t.TempDir(), "bitstream", data))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoad(t *testing.T) {
	for name, data := range map[string][]byte{
		"gbs":  gbsFile(t, testIf, testAFU, 1001),
		"aocx": aocxFile(t, testIf, testAFU, 1001),
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			card := testCard(t, testIf, 2, testAFU2)
			port := card.Ports[1]
			bs := openTestBitstream(t, data)
			sim := &SimProgrammer{}

			res, err := Load(ctx, sim, card, port, bs, LoadOptions{SHA256: sha256Hex(data)})
			if err != nil {
				t.Fatal(err)
			}
			if got := readAFUIDFile(t, port); got != testAFU+"\n" {
				t.Errorf("afu_id = %q, want %q", got, testAFU+"\n")
			}
			if got := readAFUIDFile(t, card.Ports[0]); got != testAFU2+"\n" {
				t.Errorf("the other port's afu_id changed to %q", got)
			}
			if res.Programmer != "sim" || res.AFUID != testAFU || res.InterfaceID != testIf || res.Path != bs.Path ||
				res.SHA256 != sha256Hex(data) || res.FileBytes != int64(len(data)) || res.PayloadBytes != 1004 {
				t.Errorf("Result = %+v", res)
			}
			if res.TotalDuration < res.ReadDuration+res.ProgramDuration+res.VerifyDuration {
				t.Errorf("total %s is less than its parts %+v", res.TotalDuration, res)
			}
			if sim.Calls(port) != 1 || sim.Calls(card.Ports[0]) != 0 {
				t.Errorf("calls: port 1 %d, port 0 %d", sim.Calls(port), sim.Calls(card.Ports[0]))
			}
		})
	}
}

func TestLoadFailures(t *testing.T) {
	good := gbsFile(t, testIf, testAFU, 64)
	// Metadata says testAFU, the (simulated) payload loads testAFU2.
	lying := gbsWithPayload(t, testIf, testAFU, func() []byte { p, _ := SimPayload(testAFU2, 64); return p }())
	for name, tc := range map[string]struct {
		data      []byte
		cardIf    string
		portsNum  int
		opts      LoadOptions
		setup     func(*SimProgrammer)
		is        []error
		want      []string
		programed bool
	}{
		"interface mismatch": {
			data: good, cardIf: testIf2,
			is:   []error{ErrInterfaceMismatch},
			want: []string{"built for interface " + testIf, "has interface \"" + testIf2 + "\"", "build the AFU for this card's FIM/interface"},
		},
		"checksum mismatch": {
			data: good, opts: LoadOptions{SHA256: strings.Repeat("0", 64)},
			is:   []error{ErrChecksumMismatch},
			want: []string{"has sha256 " + sha256Hex(good), "want " + strings.Repeat("0", 64)},
		},
		"hardware error": {
			data: good, setup: func(s *SimProgrammer) { s.FailNext(syscall.EIO) },
			is:        []error{ErrProgramFailed, syscall.EIO},
			want:      []string{"sim backend", "simulated partial-reconfiguration error"},
			programed: true,
		},
		"port id beyond ports_num": {
			data: good, portsNum: 1,
			is:        []error{ErrProgramFailed, syscall.EINVAL},
			want:      []string{"port_id 1 is not below ports_num 1"},
			programed: true,
		},
		"loaded AFU differs": {
			data:      lying,
			is:        []error{ErrVerifyFailed},
			want:      []string{"reports AFU " + testAFU2, "want " + testAFU},
			programed: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			card := testCard(t, testIf, 2, testAFU2)
			if tc.cardIf != "" {
				card.InterfaceID = tc.cardIf
			}
			if tc.portsNum != 0 {
				card.PortsNum = tc.portsNum
			}
			sim := &SimProgrammer{}
			if tc.setup != nil {
				tc.setup(sim)
			}
			_, err := Load(ctx, sim, card, card.Ports[1], openTestBitstream(t, tc.data), tc.opts)
			wantErr(t, err, tc.want...)
			for _, target := range tc.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not match %v", err, target)
				}
			}
			if got := sim.TotalCalls() > 0; got != tc.programed {
				t.Errorf("programmer called: %v, want %v", got, tc.programed)
			}
		})
	}
}

// busyThen returns an afu_id reader that reports EBUSY, as the kernel does
// while the port is disabled, n times and then reads the file, counting
// calls.
func busyThen(n int, calls *int) func(*discovery.Port) (string, error) {
	return func(p *discovery.Port) (string, error) {
		*calls++
		if *calls <= n {
			return "", busy(p)
		}
		return p.ReadAFUID()
	}
}

func busy(p *discovery.Port) error {
	return fmt.Errorf("read %s: %w", p.AFUIDPath(), syscall.EBUSY)
}

func TestLoadVerifyToleratesBusyAFUID(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := testCard(t, testIf, 1, testAFU2)
	var calls int
	opts := LoadOptions{VerifyInterval: 1, readAFUID: busyThen(3, &calls)}
	if _, err := Load(ctx, &SimProgrammer{}, card, card.Ports[0], openTestBitstream(t, gbsFile(t, testIf, testAFU, 64)), opts); err != nil {
		t.Fatal(err)
	}
	if calls != 4 {
		t.Errorf("afu_id read %d times, want 3 busy reads and 1 good one", calls)
	}
}

func TestLoadVerifyGivesUp(t *testing.T) {
	card := testCard(t, testIf, 1, testAFU2)
	bs := openTestBitstream(t, gbsFile(t, testIf, testAFU, 64))
	t.Run("timeout", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		var calls int
		// A deadline that has passed by the first busy read.
		opts := LoadOptions{VerifyTimeout: 1, readAFUID: busyThen(1<<30, &calls)}
		_, err := Load(ctx, &SimProgrammer{}, card, card.Ports[0], bs, opts)
		wantErr(t, err, "still busy")
		if !errors.Is(err, ErrVerifyFailed) || !errors.Is(err, syscall.EBUSY) {
			t.Errorf("error %q does not match ErrVerifyFailed and EBUSY", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		opts := LoadOptions{readAFUID: func(p *discovery.Port) (string, error) {
			cancel()
			return "", busy(p)
		}}
		_, err := Load(ctx, &SimProgrammer{}, card, card.Ports[0], bs, opts)
		// Stopped by its caller (a release): no fault of the device.
		if errors.Is(err, ErrVerifyFailed) || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled and not ErrVerifyFailed", err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		opts := LoadOptions{readAFUID: func(*discovery.Port) (string, error) { return "", syscall.ENOENT }}
		_, err := Load(ctx, &SimProgrammer{}, card, card.Ports[0], bs, opts)
		if !errors.Is(err, ErrVerifyFailed) || !errors.Is(err, syscall.ENOENT) {
			t.Errorf("got %v, want ErrVerifyFailed and ENOENT", err)
		}
	})
}

// TestLoadInParallel loads two ports at once and holds both inside the
// programmer until both have started: distinct regions program in parallel.
func TestLoadInParallel(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := testCard(t, testIf, 2, testAFU2)
	bs := openTestBitstream(t, gbsFile(t, testIf, testAFU, 64))
	gate := make(chan struct{})
	started := make(chan string, 2)
	sim := &SimProgrammer{Gate: gate, OnStart: func(_ *discovery.Card, p *discovery.Port) { started <- p.Node.Name }}
	errs := make(chan error, 2)
	for _, p := range card.Ports {
		go func() {
			_, err := Load(ctx, sim, card, p, bs, LoadOptions{})
			errs <- err
		}()
	}
	<-started
	<-started
	if got := sim.MaxConcurrent(); got != 2 {
		t.Errorf("MaxConcurrent = %d with both calls started, want 2", got)
	}
	close(gate)
	for range card.Ports {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if sim.Overlaps() != 0 {
		t.Errorf("Overlaps = %d, want 0", sim.Overlaps())
	}
	for _, p := range card.Ports {
		if got := readAFUIDFile(t, p); got != testAFU+"\n" {
			t.Errorf("%s afu_id = %q", p.Node.Name, got)
		}
	}
}

func TestLoadRequiresArguments(t *testing.T) {
	_, err := Load(context.Background(), &SimProgrammer{}, nil, nil, nil, LoadOptions{})
	wantErr(t, err, "all required")
}

func TestLoadXclbin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	card := xrtTestCard(t, testXIf, testXclbin2)
	port := card.Ports[0]
	data := xclbinFile(t, testXIf, testXclbin, 1001)
	bs := openTestBitstream(t, data)
	sim := &SimProgrammer{}
	res, err := Load(ctx, sim, card, port, bs, LoadOptions{SHA256: sha256Hex(data)})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAFUIDFile(t, port); got != testXclbinDsh+"\n" {
		t.Errorf("xclbinuuid = %q, want %q", got, testXclbinDsh+"\n")
	}
	if res.Programmer != "sim" || res.AFUID != testXclbin || res.InterfaceID != testXIf ||
		res.SHA256 != sha256Hex(data) || res.FileBytes != int64(len(data)) || res.PayloadBytes != int64(len(data)) {
		t.Errorf("Result = %+v, want the whole %d-byte file as payload", res, len(data))
	}
}

// TestLoadRefusesOtherFamily: a bitstream of the other card family is
// refused before anything is read or programmed.
func TestLoadRefusesOtherFamily(t *testing.T) {
	xclbin := openTestBitstream(t, xclbinFile(t, testIf, testXclbin, 64))
	gbs := openTestBitstream(t, gbsFile(t, testXIf, testAFU, 64))
	aocx := openTestBitstream(t, aocxFile(t, testXIf, testAFU, 64))
	intel := func(d discovery.KernelDriver) *discovery.Card {
		c := testCard(t, testIf, 1, testAFU2)
		c.Driver = d
		return c
	}
	for name, tc := range map[string]struct {
		card *discovery.Card
		bs   *Bitstream
		want []string
	}{
		"xclbin on DFL":  {intel(discovery.DriverDFL), xclbin, []string{"is in format xclbin", `has kernel driver "dfl", whose cards load gbs or aocx`, "use a bitstream in one of those formats built for interface " + testIf}},
		"xclbin on OPAE": {intel(discovery.DriverOPAE), xclbin, []string{`has kernel driver "opae"`}},
		"GBS on XRT":     {xrtTestCard(t, testXIf, ""), gbs, []string{"is in format gbs", "card " + testUserPF + ` (port fpga-0000-3b-00-1-p0) has kernel driver "xrt", whose cards load xclbin`, "built for interface " + testXIf}},
		"AOCX on XRT":    {xrtTestCard(t, testXIf, ""), aocx, []string{"is in format aocx"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			sim := &SimProgrammer{}
			before := readAFUIDFile(t, tc.card.Ports[0])
			res, err := Load(ctx, sim, tc.card, tc.card.Ports[0], tc.bs, LoadOptions{})
			wantErr(t, err, tc.want...)
			if !errors.Is(err, ErrFormatMismatch) || errors.Is(err, ErrInterfaceMismatch) {
				t.Errorf("error %q does not match ErrFormatMismatch alone", err)
			}
			if sim.TotalCalls() != 0 || res.FileBytes != 0 {
				t.Errorf("programmer called %d times, %d bytes read: want nothing done", sim.TotalCalls(), res.FileBytes)
			}
			if got := readAFUIDFile(t, tc.card.Ports[0]); got != before {
				t.Errorf("AFU ID attribute changed to %q", got)
			}
		})
	}
}

func TestLoadXclbinFailures(t *testing.T) {
	good := xclbinFile(t, testXIf, testXclbin, 64)
	for name, tc := range map[string]struct {
		data      []byte
		cardIf    string
		opts      LoadOptions
		is        error
		want      []string
		programed bool
	}{
		"interface mismatch": {
			data: good, cardIf: testIf2, is: ErrInterfaceMismatch,
			want: []string{"built for interface " + testXIf, "has interface \"" + testIf2 + "\""},
		},
		"checksum mismatch": {
			data: good, opts: LoadOptions{SHA256: strings.Repeat("0", 64)}, is: ErrChecksumMismatch,
			want: []string{"has sha256 " + sha256Hex(good)},
		},
		"xclbinuuid stays empty": {
			// The programmer loads nothing; a deadline that has passed by
			// the first read ends the wait.
			data: good, opts: LoadOptions{VerifyTimeout: 1},
			is: ErrVerifyFailed, want: []string{"xclbinuuid of port fpga-0000-3b-00-1-p0 still empty", "no xclbin is loaded"}, programed: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			card := xrtTestCard(t, testXIf, "")
			if tc.cardIf != "" {
				card.InterfaceID = tc.cardIf
			}
			// A programmer that "succeeds" without loading anything.
			calls := 0
			p := programmerFunc(func(context.Context, *discovery.Card, *discovery.Port, []byte) error {
				calls++
				return nil
			})
			_, err := Load(ctx, p, card, card.Ports[0], openTestBitstream(t, tc.data), tc.opts)
			wantErr(t, err, tc.want...)
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q does not match %v", err, tc.is)
			}
			if got := calls > 0; got != tc.programed {
				t.Errorf("programmer called: %v, want %v", got, tc.programed)
			}
		})
	}
}

// programmerFunc is a Programmer made of a function.
type programmerFunc func(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error

func (f programmerFunc) Program(ctx context.Context, card *discovery.Card, port *discovery.Port, payload []byte) error {
	return f(ctx, card, port, payload)
}
func (f programmerFunc) Name() string { return "func" }

func TestReadXclbinUUID(t *testing.T) {
	card := xrtTestCard(t, testXIf, "")
	port := card.Ports[0]
	for name, tc := range map[string]struct {
		content, want, err string
		notLoaded          bool
	}{
		"empty":        {content: "", err: "empty: no xclbin loaded", notLoaded: true},
		"newline only": {content: "\n", notLoaded: true, err: "empty"},
		"dashed":       {content: testXclbinDsh + "\n", want: testXclbin},
		"other slot":   {content: dashedUUID(testXclbin2) + "\n" + testXclbinDsh + "\n", want: testXclbin},
		"not there":    {content: dashedUUID(testXclbin2) + "\n" + dashedUUID(testAFU) + "\n", want: testXclbin2},
		"not a UUID":   {content: "garbage\n", err: `id "garbage"`},
	} {
		t.Run(name, func(t *testing.T) {
			writeFile(t, filepath.Dir(port.AFUIDPath()), "xclbinuuid", []byte(tc.content))
			id, err := ReadXclbinUUID(port, testXclbin)
			if tc.err != "" {
				wantErr(t, err, port.AFUIDPath(), tc.err)
				if errors.Is(err, ErrNotLoaded) != tc.notLoaded {
					t.Errorf("error %q matches ErrNotLoaded: %v, want %v", err, !tc.notLoaded, tc.notLoaded)
				}
				return
			}
			if err != nil || id != tc.want {
				t.Errorf("got %q, %v; want %q", id, err, tc.want)
			}
		})
	}
}

// TestLoadStoppedIsNoDeviceFault: programming that the caller stops (its
// context ends with a cause) fails with that cause, not as a failure of
// the device (ErrProgramFailed, which quarantines it).
func TestLoadStoppedIsNoDeviceFault(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	data := gbsFile(t, testIf, testAFU, 1001)
	card := testCard(t, testIf, 1, testAFU2)
	started := make(chan struct{}, 1)
	sim := &SimProgrammer{Gate: make(chan struct{}), OnStart: func(*discovery.Card, *discovery.Port) { started <- struct{}{} }}
	ctx, cancel := context.WithCancelCause(ctx)
	unprepared := errors.New("claim unprepared")
	go func() {
		<-started
		cancel(unprepared)
	}()
	_, err := Load(ctx, sim, card, card.Ports[0], openTestBitstream(t, data), LoadOptions{SHA256: sha256Hex(data)})
	if !errors.Is(err, unprepared) || errors.Is(err, ErrProgramFailed) {
		t.Fatalf("Load stopped by its caller: %v; want the cause (%v), not %v", err, unprepared, ErrProgramFailed)
	}
}

// TestXclbinForAnyInterfaceOfTheShell: a shell that lists several
// interface UUIDs loads an xclbin built for any of them. The repository
// finds one for the first interface it holds one for, in the card's order;
// an xclbin for an interface the shell does not list is refused before the
// programmer runs, naming every interface the card has.
func TestXclbinForAnyInterfaceOfTheShell(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	writeFile(t, dir, "second/a.xclbin", xclbinFile(t, testIf2, testXclbin, 64))
	writeFile(t, dir, "first/b.xclbin", xclbinFile(t, testXIf, testXclbin2, 64))
	writeFile(t, dir, "second/b.xclbin", xclbinFile(t, testIf2, testXclbin2, 64))
	writeFile(t, dir, "other/c.xclbin", xclbinFile(t, testIf, testXclbin, 64))
	r := newTestRepository(t, dir)
	card := xrtTestCard(t, testXIf, "")
	card.InterfaceIDs = []string{testXIf, testIf2}
	if got := card.Interfaces(); !slices.Equal(got, []string{testXIf, testIf2}) {
		t.Fatalf("Interfaces() = %v", got)
	}

	bs, err := r.FindFor(card.Interfaces(), testXclbin)
	if err != nil || bs.InterfaceID != testIf2 {
		t.Fatalf("FindFor(%s) = %+v, %v: want the xclbin built for the second interface", testXclbin, bs, err)
	}
	sim := &SimProgrammer{}
	if _, err := Load(ctx, sim, card, card.Ports[0], bs, LoadOptions{}); err != nil {
		t.Fatalf("load an xclbin built for the shell's second interface: %v", err)
	}
	if got := readAFUIDFile(t, card.Ports[0]); got != testXclbinDsh+"\n" {
		t.Errorf("xclbinuuid = %q, want %s", got, testXclbinDsh)
	}
	if bs, err := r.FindFor(card.Interfaces(), testXclbin2); err != nil || bs.InterfaceID != testXIf {
		t.Errorf("FindFor(%s) = %+v, %v: want the build for the first interface", testXclbin2, bs, err)
	}

	other, err := r.FindByName("other/c.xclbin", "")
	if err != nil {
		t.Fatal(err)
	}
	calls := sim.TotalCalls()
	_, err = Load(ctx, sim, card, card.Ports[0], other, LoadOptions{})
	wantErr(t, err, "built for interface "+testIf, "has interfaces "+testXIf+", "+testIf2)
	if !errors.Is(err, ErrInterfaceMismatch) || sim.TotalCalls() != calls {
		t.Errorf("error %v (programmer called %d more times): want ErrInterfaceMismatch before programming", err, sim.TotalCalls()-calls)
	}
	_, err = r.FindFor([]string{testIf}, testXclbin2)
	wantErr(t, err, "no bitstream for AFU "+testXclbin2+" with interface "+testIf, "found it only for interfaces ["+testIf2+" "+testXIf+"]")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("error %v does not match ErrNotFound", err)
	}
}
