package discovery

import (
	"strings"
	"testing"
)

func TestParseUevent(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		wantErr   string
		relevant  bool
	}{
		{name: "dfl port add", msg: "add@/devices/pci0000:00/0000:00:01.0/0000:01:00.0/fpga_region/region0/dfl-port.0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:01.0/0000:01:00.0/fpga_region/region0/dfl-port.0\x00SUBSYSTEM=dfl\x00MAJOR=511\x00MINOR=0\x00DEVNAME=dfl-port.0\x00SEQNUM=1\x00", relevant: true},
		{name: "fpga region remove", msg: "remove@/devices/pci0000:00/0000:00:01.0/0000:01:00.0/fpga_region/region0\x00ACTION=remove\x00SUBSYSTEM=fpga_region\x00", relevant: true},
		{name: "accelerator pci add", msg: "add@/devices/pci0000:00/0000:00:01.0/0000:01:00.0\x00ACTION=add\x00SUBSYSTEM=pci\x00PCI_CLASS=120000\x00", relevant: true},
		{name: "network pci add", msg: "add@/devices/pci0000:00/0000:00:03.0\x00ACTION=add\x00SUBSYSTEM=pci\x00PCI_CLASS=20000\x00"},
		{name: "opae port by path", msg: "change@/devices/pci0000:5e/0000:5e:00.0/fpga/intel-fpga-dev.0/intel-fpga-port.0\x00ACTION=change\x00SUBSYSTEM=intel-fpga-port\x00", relevant: true},
		{name: "usb", msg: "add@/devices/usb1\x00ACTION=add\x00SUBSYSTEM=usb\x00"},
		{name: "udev message", msg: "libudev\x00\xfe\xed\xca\xfe", wantErr: "udev"},
		{name: "no at", msg: "add/devices\x00", wantErr: "ACTION@/DEVPATH"},
		{name: "bad field", msg: "add@/devices/x\x00NOEQUALS\x00", wantErr: "KEY=VALUE"},
		{name: "disagreeing action", msg: "add@/devices/x\x00ACTION=remove\x00", wantErr: "disagrees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := ParseUevent([]byte(tc.msg))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.Relevant() != tc.relevant {
				t.Fatalf("relevant = %v, want %v (%+v)", ev.Relevant(), tc.relevant, ev)
			}
		})
	}
}

func FuzzParseUevent(f *testing.F) {
	f.Add([]byte("add@/devices/pci0000:00/0000:00:01.0/0000:01:00.0/fpga_region/region0\x00ACTION=add\x00SUBSYSTEM=fpga_region\x00"))
	f.Add([]byte("remove@/devices/x\x00"))
	f.Add([]byte("libudev\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		ev, err := ParseUevent(msg)
		if err != nil {
			return
		}
		if ev.Action == "" || !strings.HasPrefix(ev.DevPath, "/") {
			t.Fatalf("accepted event without action or devpath: %+v", ev)
		}
		if a, ok := ev.Env["ACTION"]; ok && a != ev.Action {
			t.Fatalf("accepted event whose ACTION disagrees: %+v", ev)
		}
		_ = ev.Relevant()
	})
}

func FuzzCanonicalID(f *testing.F) {
	f.Add("69528db6-eb31-577a-8c36-68f9faa081f6")
	f.Add("69528DB6EB31577A8C3668F9FAA081F6\n")
	f.Add("0x123")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := CanonicalID(s)
		if err != nil {
			return
		}
		if len(id) != 32 || strings.ToLower(id) != id || strings.Contains(id, "-") {
			t.Fatalf("CanonicalID(%q) = %q is not canonical", s, id)
		}
		if again, err := CanonicalID(id); err != nil || again != id {
			t.Fatalf("CanonicalID is not idempotent on %q: %q, %v", id, again, err)
		}
	})
}
