package checkpoint

import (
	"errors"
	"strings"
	"testing"
)

func sampleCheckpoint() *Checkpoint {
	return &Checkpoint{Version: Version, BootID: "boot-1", Claims: map[string]*ClaimRecord{
		"uid-1": {UID: "uid-1", Namespace: "ns", Name: "a", Phase: PhaseCompleted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-01-00-0-p0", Requests: []string{"r"}, AFUID: "d8424dc4a4a3c413f89e433683f9040b", Programmed: true, CDIDeviceID: "fpga.dra.dev/port=uid-1-fpga-0000-01-00-0-p0"}}},
		"uid-2": {UID: "uid-2", Namespace: "ns", Name: "b", Phase: PhaseStarted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-02-00-0-p0"}}},
	}}
}

func TestDecode(t *testing.T) {
	good, err := Encode(sampleCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		data          string
		newer, broken bool
		want          string
	}{
		{name: "current", data: string(good)},
		{name: "development version 1", data: `{"version":1,"checksum":"","data":{"bootID":"boot-1","claims":{}}}`, broken: true, want: "unknown format version 1"},
		{name: "garbage", data: "\x00\x01", broken: true, want: "corrupt"},
		{name: "unknown field", data: strings.Replace(string(good), `"version"`, `"extra":1,"version"`, 1), broken: true, want: "unknown field"},
		{name: "trailing data", data: string(good) + "{}", broken: true, want: "after top-level value"},
		{name: "unknown old version", data: strings.Replace(string(good), `"version":2`, `"version":0`, 1), broken: true, want: "unknown format version 0"},
		{name: "version 3", data: strings.Replace(string(good), `"version":2`, `"version":3`, 1)},
		{name: "newer version", data: strings.Replace(string(good), `"version":2`, `"version":4`, 1), newer: true, want: "format version 4, this driver reads versions up to 3: upgrade the driver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := Decode([]byte(tc.data))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				if len(cp.Claims) != 2 || cp.Claims["uid-1"].Devices[0].AFUID == "" {
					t.Fatalf("decoded %+v", cp)
				}
				return
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if errors.Is(err, ErrNewer) != tc.newer || errors.Is(err, ErrCorrupt) != tc.broken {
				t.Fatalf("error %v: newer %v broken %v, want %v %v", err, errors.Is(err, ErrNewer), errors.Is(err, ErrCorrupt), tc.newer, tc.broken)
			}
		})
	}
}

func TestSanitizesDoubleHolds(t *testing.T) {
	cp := sampleCheckpoint()
	cp.Claims["uid-2"].Devices[0].Device = "fpga-0000-01-00-0-p0"
	if err := cp.validate(); err == nil || !strings.Contains(err.Error(), "held by claims") {
		t.Fatalf("validate: %v", err)
	}
	if s := cp.sanitized(); len(s.Claims) != 1 {
		t.Fatalf("sanitized kept %d claims holding one device", len(s.Claims))
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Encode(sampleCheckpoint())
	f.Add(good)
	f.Add([]byte(`{"version":1,"checksum":"","data":{}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":3,"claims":{"u":{"uid":"u","renumbered":["/dev/dfl-port.0 508:0"]}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, _ := Decode(b)
		if cp == nil {
			return
		}
		// Whatever is returned (also alongside a corruption error) must
		// hold each device at most once and re-encode.
		if err := cp.validate(); err != nil {
			t.Fatalf("returned an inconsistent checkpoint (err %v): %v", err, cp)
		}
		if _, err := Encode(cp); err != nil {
			t.Fatal(err)
		}
	})
}
