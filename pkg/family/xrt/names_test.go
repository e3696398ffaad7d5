package xrt

import (
	"fmt"
	"testing"
)

func TestPCIInstance(t *testing.T) {
	for bdf, want := range map[string]int{"0000:3b:00.1": 0x3b*256 + 1, "0001:01:00.1": 65536 + 256 + 1, "ffff:ff:1f.7": 0xffff*65536 + 0xff*256 + 31*8 + 7} {
		if got, err := pciInstance(bdf); err != nil || got != want {
			t.Errorf("pciInstance(%s) = %d, %v; want %d", bdf, got, err, want)
		}
	}
	for _, bad := range []string{"", "0000:3b:00", "0000:3b:20.0", "0000:3b:00.8", "0000:3b:00.1.2", "zz:3b:00.1", "0000:3b:00.-1"} {
		if got, err := pciInstance(bad); err == nil {
			t.Errorf("pciInstance(%q) = %d, want an error", bad, got)
		}
	}
}

// FuzzXRTNames: the PCI addresses of the driver directories and the
// /dev/xfpga names never panic the parsers, and an accepted address is
// one Sscanf reads the same way.
func FuzzXRTNames(f *testing.F) {
	f.Add("0000:3b:00.1", "dma.qdma.u15105.0")
	f.Add("0001:01:00.1", "flash.m65792")
	f.Add("0:0:0.0", "u")
	f.Add("+1:1:1.1", "u-1.u99999999999")
	f.Fuzz(func(t *testing.T, bdf, name string) {
		if inst, err := pciInstance(bdf); err == nil {
			var d, b, s, fn int
			if n, serr := fmt.Sscanf(bdf, "%x:%x:%x.%x", &d, &b, &s, &fn); serr != nil || n != 4 || inst != d*65536+b*256+s*8+fn {
				t.Fatalf("pciInstance(%q) = %d; Sscanf reads %d:%d:%d.%d (%v)", bdf, inst, d, b, s, fn, serr)
			}
		}
		if inst, ok := xfpgaInstance([]byte(name)); ok && inst < 0 {
			t.Fatalf("xfpgaInstance(%q) = %d", name, inst)
		}
	})
}
