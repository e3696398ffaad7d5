package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func claimN(i int) *ClaimRecord {
	uid := fmt.Sprintf("uid-%d", i)
	return &ClaimRecord{UID: uid, Namespace: "ns", Name: fmt.Sprintf("c%d", i), Phase: PhaseCompleted,
		Devices: []DeviceRecord{{Device: fmt.Sprintf("fpga-0000-%02x-00-0-p0", i%256) + fmt.Sprint(i/256)}}}
}

func TestCheckpointFileSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	cf, cp, err := OpenCheckpoint(path)
	if err != nil || len(cp.Claims) != 0 {
		t.Fatalf("new checkpoint: %v %+v", err, cp)
	}
	for i := 1; i <= 3; i++ {
		cp.Claims[claimN(i).UID] = claimN(i)
		if err := cf.Save(cp); err != nil {
			t.Fatal(err)
		}
	}
	cf.Close()
	cf, got, err := OpenCheckpoint(path)
	if err != nil || len(got.Claims) != 3 {
		t.Fatalf("reopen: %v, %d claims, want 3", err, len(got.Claims))
	}
	cf.Close()

	// A torn write: the newest slot's payload cut short in place.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	half := len(b) / 2
	newest := 0
	if parseSlot(b[half:]).gen > parseSlot(b[:half]).gen {
		newest = half
	}
	for i := newest + slotHeaderSize + 10; i < newest+half; i++ {
		b[i] = 0
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, got, err = OpenCheckpoint(path)
	if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "last save may be lost") {
		t.Fatalf("torn newest slot: %v, want a loud warning", err)
	}
	if len(got.Claims) != 2 {
		t.Fatalf("recovered %d claims from the previous generation, want 2", len(got.Claims))
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("damaged file not kept aside: %v", aside)
	}
}

func TestCheckpointFileGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	cf, cp, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i++ { // ~150 bytes a claim: past the first slot size
		cp.Claims[claimN(i).UID] = claimN(i)
	}
	if err := cf.Save(cp); err != nil {
		t.Fatal(err)
	}
	if err := cf.Save(cp); err != nil {
		t.Fatal(err)
	}
	cf.Close()
	if fi, err := os.Stat(path); err != nil || fi.Size() <= 2*minSlotSize {
		t.Fatalf("file did not grow: %v %v", fi, err)
	}
	_, got, err := OpenCheckpoint(path)
	if err != nil || len(got.Claims) != 600 {
		t.Fatalf("reopen after growth: %v, %d claims", err, len(got.Claims))
	}
}

func TestCheckpointFileMigratesEnvelope(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	old, err := EncodeCheckpoint(sampleCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	cf, cp, err := OpenCheckpoint(path)
	if err != nil || len(cp.Claims) != 2 {
		t.Fatalf("old format: %v, %d claims", err, len(cp.Claims))
	}
	cf.Close()
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), slotMagic) {
		t.Fatal("the old format was not rewritten as slots")
	}
}

func FuzzReadCheckpoint(f *testing.F) {
	payload, _ := EncodeCheckpoint(sampleCheckpoint())
	two := append(encodeSlot(2, payload), make([]byte, 64)...)
	other := append(encodeSlot(1, payload), make([]byte, 64)...)
	other = append(other, make([]byte, len(two)-len(other))...)
	f.Add(append(two, other...))
	f.Add(payload)
	f.Add([]byte(slotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, _, _ := ReadCheckpoint(b)
		if cp == nil {
			return
		}
		if err := cp.validate(); err != nil {
			t.Fatalf("returned an inconsistent checkpoint: %v", err)
		}
	})
}
