package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleCheckpoint() *Checkpoint {
	return &Checkpoint{BootID: "boot-1", Claims: map[string]*ClaimRecord{
		"uid-1": {UID: "uid-1", Namespace: "ns", Name: "a", Phase: PhaseCompleted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-01-00-0-p0", Requests: []string{"r"}, AFUID: "d8424dc4a4a3c413f89e433683f9040b", Programmed: true, CDIDeviceID: "fpga.dra.dev/port=uid-1-fpga-0000-01-00-0-p0"}}},
		"uid-2": {UID: "uid-2", Namespace: "ns", Name: "b", Phase: PhaseStarted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-02-00-0-p0"}}},
	}}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	cf, _, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cf.Save(sampleCheckpoint()); err != nil {
		t.Fatal(err)
	}
	cf.Close()
	cf, got, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	if len(got.Claims) != 2 || got.Claims["uid-1"].Devices[0].CDIDeviceID == "" || got.BootID != "boot-1" {
		t.Fatalf("round trip lost data: %+v", got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestCheckpointMissingIsEmpty(t *testing.T) {
	_, cp, err := OpenCheckpoint(filepath.Join(t.TempDir(), "none.json"))
	if err != nil || len(cp.Claims) != 0 {
		t.Fatalf("missing checkpoint: %v %+v", err, cp)
	}
}

func TestCheckpointRefusals(t *testing.T) {
	good, err := EncodeCheckpoint(sampleCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		data       string
		corrupt    bool
		wantClaims int
		want       string
	}{
		{name: "garbage", data: "\x00\x01", corrupt: true, want: "corrupt"},
		{name: "unknown field", data: strings.Replace(string(good), `"version"`, `"extra":1,"version"`, 1), corrupt: true, want: "unknown field"},
		{name: "checksum", data: strings.Replace(string(good), `"boot-1"`, `"boot-X"`, 1), corrupt: true, wantClaims: 2, want: "checksum"},
		{name: "newer version", data: strings.Replace(string(good), `"version":1`, `"version":2`, 1), want: "version 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, cp, err := OpenCheckpoint(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if errors.Is(err, ErrCorruptCheckpoint) != tc.corrupt {
				t.Fatalf("corrupt = %v, want %v: %v", !tc.corrupt, tc.corrupt, err)
			}
			if !tc.corrupt {
				if _, statErr := os.Stat(path); statErr != nil {
					t.Fatalf("a checkpoint of another version must stay in place: %v", statErr)
				}
				return
			}
			if len(cp.Claims) != tc.wantClaims {
				t.Fatalf("recovered %d claims, want %d", len(cp.Claims), tc.wantClaims)
			}
			if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
				t.Fatalf("not kept aside: %v", aside)
			}
		})
	}
}

func TestCheckpointSanitizesDoubleHolds(t *testing.T) {
	cp := sampleCheckpoint()
	cp.Claims["uid-2"].Devices[0].Device = "fpga-0000-01-00-0-p0"
	if err := cp.validate(); err == nil || !strings.Contains(err.Error(), "held by claims") {
		t.Fatalf("validate: %v", err)
	}
	if s := cp.sanitized(); len(s.Claims) != 1 {
		t.Fatalf("sanitized kept %d claims holding one device", len(s.Claims))
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	good, _ := EncodeCheckpoint(sampleCheckpoint())
	f.Add(good)
	f.Add([]byte(`{"version":1,"checksum":"","data":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, _ := DecodeCheckpoint(b)
		if cp == nil {
			return
		}
		// Whatever is returned (also alongside a corruption error) must
		// hold each device at most once and re-encode.
		if err := cp.validate(); err != nil {
			t.Fatalf("returned an inconsistent checkpoint (err %v): %v", err, cp)
		}
		if _, err := EncodeCheckpoint(cp); err != nil {
			t.Fatal(err)
		}
	})
}
