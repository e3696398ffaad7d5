package program

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func TestNewProgrammer(t *testing.T) {
	for kind, want := range map[string]string{"": "auto", "auto": "auto", "dfl": "dfl", "opae": "opae", "xrt": "xrt", "sim": "sim"} {
		p, err := NewProgrammer(kind)
		if err != nil || p.Name() != want {
			t.Errorf("NewProgrammer(%q) = %v, %v; want %s", kind, p, err, want)
		}
	}
	sim := &SimProgrammer{}
	if p, _ := NewProgrammer(KindSim, WithSimulator(sim)); p != sim {
		t.Errorf("WithSimulator was not used")
	}
	_, err := NewProgrammer("vfio")
	wantErr(t, err, `programmer "vfio" is not one of auto, dfl, opae, xrt, sim`)
}

func TestNewProgrammerXRTConfig(t *testing.T) {
	p, err := NewProgrammer(KindXRT)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.(*xrtProgrammer).cfg, (XRTConfig{ToolDir: DefaultXRTToolDir, Timeout: DefaultXRTTimeout}); got != want {
		t.Errorf("default config %+v, want %+v", got, want)
	}
	cfg := XRTConfig{ToolDir: "/opt/xilinx/xrt/bin/", HostRoot: "/host/", Timeout: time.Minute}
	for _, kind := range []string{KindXRT, KindAuto} {
		p, err := NewProgrammer(kind, WithXRT(cfg))
		if err != nil {
			t.Fatal(err)
		}
		x, ok := p.(*xrtProgrammer)
		if a, isAuto := p.(*autoProgrammer); isAuto {
			b, err := a.backend(&discovery.Card{Driver: discovery.DriverXRT})
			if err != nil {
				t.Fatal(err)
			}
			x, ok = b.(*xrtProgrammer)
		}
		if want := (XRTConfig{ToolDir: "/opt/xilinx/xrt/bin", HostRoot: "/host", Timeout: time.Minute}); !ok || x.cfg != want {
			t.Errorf("%s: config %+v, want %+v", kind, x.cfg, want)
		}
	}
	for name, tc := range map[string]struct {
		cfg  XRTConfig
		want string
	}{
		"relative tool dir":  {XRTConfig{ToolDir: "opt/xilinx/xrt/bin"}, `XRT tool directory "opt/xilinx/xrt/bin" is not an absolute path`},
		"relative host root": {XRTConfig{HostRoot: "host"}, `XRT host root "host" is not an absolute path`},
		"negative timeout":   {XRTConfig{Timeout: -time.Second}, "XRT programming timeout -1s is negative"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewProgrammer(KindAuto, WithXRT(tc.cfg))
			wantErr(t, err, tc.want)
		})
	}
}

func TestAutoProgrammerPicksByDriver(t *testing.T) {
	p, _ := NewProgrammer(KindAuto)
	for driver, want := range map[discovery.KernelDriver]string{discovery.DriverDFL: "dfl", discovery.DriverOPAE: "opae", discovery.DriverXRT: "xrt"} {
		if got := backendName(p, &discovery.Card{Driver: driver}); got != want {
			t.Errorf("driver %s: backend %s, want %s", driver, got, want)
		}
	}
	err := p.Program(context.Background(), &discovery.Card{Driver: discovery.DriverNone, PCIAddress: "0000:81:00.0"}, &discovery.Port{}, []byte{1, 2, 3, 4})
	wantErr(t, err, `card 0000:81:00.0 has kernel driver "none", which no programmer handles`)
	if !errors.Is(err, ErrProgramFailed) {
		t.Errorf("error %q does not match ErrProgramFailed", err)
	}
}

// TestIntelFamiliesKeepTheirHotplugEvents: registering the Intel families'
// programming keeps the hot-plug events their discovery matches, so a
// daemon (which links this package) still rescans when a port comes.
func TestIntelFamiliesKeepTheirHotplugEvents(t *testing.T) {
	for _, e := range []discovery.Uevent{
		{Action: "add", Subsystem: "dfl", DevPath: "/devices/pci0000:00/0000:00:01.0/0000:01:00.0/fpga_region/region0/dfl-port.0"},
		{Action: "change", Subsystem: "intel-fpga-port", DevPath: "/devices/pci0000:5e/0000:5e:00.0/fpga/intel-fpga-dev.0/intel-fpga-port.0"},
	} {
		if !e.Relevant() {
			t.Errorf("event %s %s of subsystem %s is not relevant, want relevant", e.Action, e.DevPath, e.Subsystem)
		}
	}
}
