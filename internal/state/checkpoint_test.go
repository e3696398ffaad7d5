package state

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleCheckpoint() *Checkpoint {
	return &Checkpoint{Version: CheckpointVersion, BootID: "boot-1", Claims: map[string]*ClaimRecord{
		"uid-1": {UID: "uid-1", Namespace: "ns", Name: "a", Phase: PhaseCompleted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-01-00-0-p0", Requests: []string{"r"}, AFUID: "d8424dc4a4a3c413f89e433683f9040b", Programmed: true, CDIDeviceID: "fpga.dra.dev/port=uid-1-fpga-0000-01-00-0-p0"}}},
		"uid-2": {UID: "uid-2", Namespace: "ns", Name: "b", Phase: PhaseStarted, BootID: "boot-1",
			Devices: []DeviceRecord{{Device: "fpga-0000-02-00-0-p0"}}},
	}}
}

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
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
	if len(got.Claims) != 2 || got.Claims["uid-1"].Devices[0].CDIDeviceID == "" || got.BootID != "boot-1" || got.Version != CheckpointVersion {
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

func TestDecodeCheckpoint(t *testing.T) {
	good, err := EncodeCheckpoint(sampleCheckpoint())
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
		{name: "newer version", data: strings.Replace(string(good), `"version":2`, `"version":4`, 1), newer: true, want: "format version 4, this driver reads versions up to 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := DecodeCheckpoint([]byte(tc.data))
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "":
				if len(cp.Claims) != 2 || cp.Version != CheckpointVersion || cp.Claims["uid-1"].Devices[0].AFUID == "" {
					t.Fatalf("decoded %+v", cp)
				}
				return
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
			if errors.Is(err, ErrNewerCheckpoint) != tc.newer || errors.Is(err, ErrCorruptCheckpoint) != tc.broken {
				t.Fatalf("error %v: newer %v broken %v, want %v %v", err, errors.Is(err, ErrNewerCheckpoint), errors.Is(err, ErrCorruptCheckpoint), tc.newer, tc.broken)
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
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":3,"claims":{"u":{"uid":"u","renumbered":["/dev/dfl-port.0 508:0"]}}}`))
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

// TestCheckpointVersionFollowsRenumbered: a checkpoint is written as
// version 2, which releases before renumbered nodes read, unless a record
// has renumbered nodes: then as version 3, which those releases refuse
// (ErrNewerCheckpoint) instead of taking the unknown field for damage.
func TestCheckpointVersionFollowsRenumbered(t *testing.T) {
	cp := sampleCheckpoint()
	b, err := EncodeCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"version":2,`) {
		t.Fatalf("checkpoint without renumbered nodes encoded as %.20s…, want version 2", b)
	}
	cp.Claims["uid-1"].Renumbered = []string{"/dev/dfl-port.0 508:0"}
	if b, err = EncodeCheckpoint(cp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"version":3,`) {
		t.Fatalf("checkpoint with renumbered nodes encoded as %.20s…, want version 3", b)
	}
	got, err := DecodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Claims["uid-1"].Renumbered; len(r) != 1 || r[0] != "/dev/dfl-port.0 508:0" {
		t.Fatalf("renumbered nodes decoded as %v", r)
	}
}
