package program

import (
	"context"
	"errors"
	"fmt"
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
		if !errors.Is(err, ErrVerifyFailed) || !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want ErrVerifyFailed and context.Canceled", err)
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
