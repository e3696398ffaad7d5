package checkpoint

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The decoder of the release before Programmed records and renumbered
// nodes (internal/state/checkpoint.go at 57c9544), kept as it was: it reads
// versions 1 and 2 with started and completed records, refuses a later
// version untouched, and takes anything else for damage, dropping claims.
type prevCheckpoint struct {
	Version int                         `json:"version"`
	BootID  string                      `json:"bootID"`
	Claims  map[string]*prevClaimRecord `json:"claims"`
}

type prevClaimRecord struct {
	UID       string             `json:"uid"`
	Namespace string             `json:"namespace"`
	Name      string             `json:"name"`
	Phase     string             `json:"phase"`
	BootID    string             `json:"bootID"`
	Devices   []prevDeviceRecord `json:"devices"`
}

type prevDeviceRecord struct {
	Device      string   `json:"device"`
	Requests    []string `json:"requests,omitempty"`
	AFUID       string   `json:"afuID,omitempty"`
	Programmed  bool     `json:"programmed,omitempty"`
	CDIDeviceID string   `json:"cdiDeviceID,omitempty"`
	Bitstream   string   `json:"bitstream,omitempty"`
	SHA256      string   `json:"sha256,omitempty"`
	LayerDigest string   `json:"layerDigest,omitempty"`
}

var (
	errPrevCorrupt = errors.New("corrupt checkpoint")
	errPrevNewer   = errors.New("checkpoint written by a newer driver")
)

func prevDecode(b []byte) (*prevCheckpoint, error) {
	var v struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", errPrevCorrupt, err)
	}
	cp := &prevCheckpoint{}
	switch {
	case v.Version > 2:
		return nil, fmt.Errorf("%w: format version %d", errPrevNewer, v.Version)
	case v.Version == 2:
		if err := strictDecode(b, cp); err != nil {
			return nil, fmt.Errorf("%w: %v", errPrevCorrupt, err)
		}
	default:
		return nil, fmt.Errorf("%w: unknown format version %d", errPrevCorrupt, v.Version)
	}
	for uid, c := range cp.Claims {
		if c == nil || c.UID != uid {
			return nil, fmt.Errorf("%w: claim entry %q does not carry its own UID", errPrevCorrupt, uid)
		}
		if c.Phase != "PrepareStarted" && c.Phase != "PrepareCompleted" {
			return nil, fmt.Errorf("%w: claim %s has unknown phase %q", errPrevCorrupt, uid, c.Phase)
		}
	}
	return cp, nil
}

// TestPreviousReleaseNeverReadsDamage: every kind of record is written in
// a version the release before reads whole, or one it refuses as newer,
// leaving the file untouched; never in one it takes for damage.
func TestPreviousReleaseNeverReadsDamage(t *testing.T) {
	rec := func(phase ClaimPhase, renumbered ...string) *ClaimRecord {
		return &ClaimRecord{UID: "u", Namespace: "ns", Name: "c", Phase: phase, BootID: "b",
			Devices: []DeviceRecord{{Device: "fpga-0", AFUID: "afu", Programmed: true, LayerDigest: "sha256:aa"}}, Renumbered: renumbered}
	}
	for _, tc := range []struct {
		name     string
		rec      *ClaimRecord
		readable bool
	}{
		{"started", rec(PhaseStarted), true},
		{"completed", rec(PhaseCompleted), true},
		{"programmed before binding", rec(PhaseProgrammed), false},
		{"renumbered", rec(PhaseCompleted, "/dev/dfl-port.0 508:0"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := New()
			cp.Claims["u"] = tc.rec
			b, err := Encode(cp)
			if err != nil {
				t.Fatal(err)
			}
			prev, err := prevDecode(b)
			switch {
			case errors.Is(err, errPrevCorrupt):
				t.Fatalf("the release before reads %s as damage and drops the claim: %v", b, err)
			case tc.readable && err != nil:
				t.Fatalf("the release before refuses %s: %v", b, err)
			case !tc.readable && !errors.Is(err, errPrevNewer):
				t.Fatalf("the release before reads %s (%+v), which it cannot carry whole", b, prev)
			case tc.readable && (prev.Claims["u"].Phase != string(tc.rec.Phase) || prev.Claims["u"].Devices[0].LayerDigest != "sha256:aa"):
				t.Fatalf("the release before read %+v", prev.Claims["u"])
			}
			got, err := Decode(b)
			if err != nil || !reflect.DeepEqual(got.Claims, cp.Claims) {
				t.Fatalf("decoded back as %+v (%v), want %+v", got, err, cp)
			}
		})
	}
}

// TestNewerVersionRefusedUntouched: a checkpoint of a version this code
// does not know fails to open with a message that names the version, the
// file and the fix, and the file is neither changed nor kept aside.
func TestNewerVersionRefusedUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	payload := []byte(`{"version":4,"bootID":"","claims":{}}`)
	b := append(encodeSlot(1, payload), make([]byte, minSlotSize-slotHeaderSize-len(payload))...)
	b = append(b, b...)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Open(path)
	if !errors.Is(err, ErrNewer) {
		t.Fatalf("newer checkpoint: %v, want ErrNewer", err)
	}
	for _, want := range []string{path, "format version 4", "reads versions up to 3", "upgrade the driver", "move the file aside"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Fatal("a newer driver's checkpoint was changed")
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("a newer driver's checkpoint was treated as damaged: %v", aside)
	}
}

// TestLoadsFilesOfMain: files written by the code before this package
// (main at 0688d57: a version 2 file holding a Programmed record, and a
// version 3 one with renumbered nodes) load whole and are written again
// in a version the release before refuses instead of reading as damage.
func TestLoadsFilesOfMain(t *testing.T) {
	for _, name := range []string{"main-0688d57-v2.ckpt.gz", "main-0688d57-v3.ckpt.gz"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, gunzip(t, filepath.Join("testdata", name)), 0o600); err != nil {
				t.Fatal(err)
			}
			s, cp, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := map[string]ClaimPhase{"uid-started": PhaseStarted, "uid-completed": PhaseCompleted, "uid-programmed": PhaseProgrammed}
			for uid, phase := range want {
				if rec := cp.Claims[uid]; rec == nil || rec.Phase != phase || rec.Devices[0].Device == "" {
					t.Fatalf("claim %s loaded as %+v, want phase %s", uid, rec, phase)
				}
			}
			if c := cp.Claims["uid-completed"]; len(c.Devices) != 2 || c.Devices[0].LayerDigest != "sha256:cc" || c.Devices[1].CDIDeviceID == "" {
				t.Fatalf("completed claim loaded as %+v", c)
			}
			if err := s.Save(1, func() (*Checkpoint, uint64) { return cp, 1 }); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			again, err := Read(b)
			if err != nil || !reflect.DeepEqual(again.Claims, cp.Claims) {
				t.Fatalf("saved again and read back: %v", err)
			}
			if _, err := prevDecode(parseSlot(b[newestSlot(b):]).payload); !errors.Is(err, errPrevNewer) {
				t.Fatalf("the release before reads the saved file as %v, want it refused as newer", err)
			}
		})
	}
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
