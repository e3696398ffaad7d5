package program

import (
	"context"
	"errors"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func TestNewProgrammer(t *testing.T) {
	for kind, want := range map[string]string{"": "auto", "auto": "auto", "dfl": "dfl", "opae": "opae", "sim": "sim"} {
		p, err := NewProgrammer(kind)
		if err != nil || p.Name() != want {
			t.Errorf("NewProgrammer(%q) = %v, %v; want %s", kind, p, err, want)
		}
	}
	sim := &SimProgrammer{}
	if p, _ := NewProgrammer(KindSim, WithSimulator(sim)); p != sim {
		t.Errorf("WithSimulator was not used")
	}
	_, err := NewProgrammer("xrt")
	wantErr(t, err, `programmer "xrt" is not one of auto, dfl, opae, sim`)
}

func TestAutoProgrammerPicksByDriver(t *testing.T) {
	p, _ := NewProgrammer(KindAuto)
	for driver, want := range map[discovery.KernelDriver]string{discovery.DriverDFL: "dfl", discovery.DriverOPAE: "opae"} {
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
