package checkpoint

import (
	"crypto/sha256"
	"encoding/binary"
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

// writeGenerations saves n checkpoints, the k-th holding claims 1..k, and
// returns the file's bytes.
func writeGenerations(t *testing.T, path string, n int) []byte {
	t.Helper()
	f, cp, err := load(path)
	if err != nil || len(cp.Claims) != 0 {
		t.Fatalf("new checkpoint: %v %+v", err, cp)
	}
	for i := 1; i <= n; i++ {
		cp.Claims[claimN(i).UID] = claimN(i)
		if err := f.save(cp); err != nil {
			t.Fatal(err)
		}
	}
	f.close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newestSlot returns the offset of the slot with the higher generation.
func newestSlot(b []byte) int {
	half := len(b) / 2
	if parseSlot(b[half:]).gen > parseSlot(b[:half]).gen {
		return half
	}
	return 0
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	f, _, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.save(sampleCheckpoint()); err != nil {
		t.Fatal(err)
	}
	f.close()
	f, got, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	if len(got.Claims) != 2 || got.Claims["uid-1"].Devices[0].CDIDeviceID == "" || got.BootID != "boot-1" {
		t.Fatalf("round trip lost data: %+v", got)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("checkpoint mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestMissingIsEmpty(t *testing.T) {
	s, cp, err := Open(filepath.Join(t.TempDir(), "none.json"))
	if err != nil || len(cp.Claims) != 0 {
		t.Fatalf("missing checkpoint: %v %+v", err, cp)
	}
	s.Close()
}

func TestSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	writeGenerations(t, path, 3)
	f, got, err := load(path)
	if err != nil || len(got.Claims) != 3 {
		t.Fatalf("reopen: %v, %d claims, want 3", err, len(got.Claims))
	}
	f.close()
}

// TestDamage damages the newest slot in each way a crash or a stray write
// can, and checks that the older valid slot is used (never the damaged
// payload), the damage is reported and the file is kept aside.
func TestDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte, newest int) []byte
		// older says the older slot is damaged (generation 3 survives).
		older bool
	}{
		{"torn payload", func(b []byte, n int) []byte {
			for i := n + slotHeaderSize + 10; i < n+len(b)/2; i++ {
				b[i] = 0
			}
			return b
		}, false},
		{"intact JSON, wrong checksum", func(b []byte, n int) []byte {
			b[n+20] ^= 0xff // the stored sha256
			return b
		}, false},
		{"payload edited", func(b []byte, n int) []byte {
			i := strings.Index(string(b[n:]), `"c3"`)
			b[n+i+2] = '9' // still valid JSON, another claim name
			return b
		}, false},
		{"magic overwritten", func(b []byte, n int) []byte {
			copy(b[n:], "XXXXXXXX")
			return b
		}, false},
		{"older slot's generation raised above the newest", func(b []byte, n int) []byte {
			o := len(b)/2 - n
			binary.LittleEndian.PutUint64(b[o+8:], 1<<40)
			return b
		}, true},
		{"file truncated into the newest slot", func(b []byte, n int) []byte {
			if n == 0 {
				// Make the newest slot the second one: swap the halves.
				half := len(b) / 2
				b = append(append([]byte(nil), b[half:]...), b[:half]...)
				n = half
			}
			return b[:n+slotHeaderSize+5]
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			b := writeGenerations(t, path, 3)
			b = tc.damage(b, newestSlot(b))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			f, got, err := load(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "last save may be lost") {
				t.Fatalf("damaged newest slot: %v, want a loud warning", err)
			}
			// The damaged file stays until the first save rewrites it.
			if err := f.save(got); err != nil {
				t.Fatal(err)
			}
			f.close()
			want := 2
			if tc.older {
				want = 3
			}
			if len(got.Claims) != want || got.Claims["uid-1"] == nil || got.Claims["uid-2"] == nil {
				t.Fatalf("recovered %v, want exactly the %d claims of the newest valid slot", got.Claims, want)
			}
			if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
				t.Fatalf("damaged file not kept aside: %v", aside)
			} else if kept, _ := os.ReadFile(aside[0]); string(kept) != string(b) {
				t.Fatal("the file kept aside is not the damaged file")
			}
			// The rewritten file is sound again.
			f, again, err := load(path)
			if err != nil || len(again.Claims) != want {
				t.Fatalf("after the rewrite: %v, %d claims", err, len(again.Claims))
			}
			f.close()
		})
	}
}

// TestFileOfDevelopmentIsDamage: slots of the development format (magic
// FPGACKP2, a version 1 payload) are damage, not a checkpoint to trust:
// the file is kept aside and rewritten empty, and the caller hears of it.
func TestFileOfDevelopmentIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	old := []byte(`{"version":1,"checksum":"","data":{"bootID":"boot-1","claims":{}}}`)
	slot := func(gen uint64) []byte {
		b := make([]byte, minSlotSize)
		copy(b, "FPGACKP2")
		binary.LittleEndian.PutUint64(b[8:], gen)
		binary.LittleEndian.PutUint32(b[16:], uint32(len(old)))
		sum := sha256.Sum256(old)
		copy(b[20:], sum[:])
		copy(b[slotHeaderSize:], old)
		return b
	}
	if err := os.WriteFile(path, append(slot(4), slot(3)...), 0o600); err != nil {
		t.Fatal(err)
	}
	s, cp, err := Open(path)
	if !errors.Is(err, ErrCorrupt) || s == nil || len(cp.Claims) != 0 {
		t.Fatalf("development checkpoint: %v, %+v; want it reported as damaged and an empty checkpoint", err, cp)
	}
	s.Close()
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("damaged file kept aside as %v, want one copy", aside)
	}
}

func TestGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	f, cp, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i++ { // ~150 bytes a claim: past the first slot size
		cp.Claims[claimN(i).UID] = claimN(i)
	}
	for range 2 {
		if err := f.save(cp); err != nil {
			t.Fatal(err)
		}
	}
	f.close()
	if fi, err := os.Stat(path); err != nil || fi.Size() <= 2*minSlotSize {
		t.Fatalf("file did not grow: %v %v", fi, err)
	}
	_, got, err := load(path)
	if err != nil || len(got.Claims) != 600 {
		t.Fatalf("reopen after growth: %v, %d claims", err, len(got.Claims))
	}
}

// TestGrowthFailingLate: a save that outgrows the slots replaces the file
// and then fails (the directory's fsync fails after the rename). The
// saves after it must reach the file that is in place, not the replaced
// one, which a restart never reads.
func TestGrowthFailingLate(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	f, cp, err := load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	cp.Claims[claimN(0).UID] = claimN(0)
	if err := f.save(cp); err != nil {
		t.Fatal(err)
	}
	f.rename = func(oldpath, newpath string) error {
		if err := os.Rename(oldpath, newpath); err != nil {
			return err
		}
		return errors.New("fsync directory: input/output error")
	}
	for i := 0; i < 600; i++ { // past the first slot size
		cp.Claims[claimN(i).UID] = claimN(i)
	}
	if err := f.save(cp); err == nil {
		t.Fatal("a save whose rewrite failed reported success")
	}
	f.rename = nil
	cp = New()
	cp.Claims[claimN(1000).UID] = claimN(1000)
	if err := f.save(cp); err != nil {
		t.Fatal(err)
	}
	_, got, err := load(path)
	if err != nil || len(got.Claims) != 1 || got.Claims[claimN(1000).UID] == nil {
		t.Fatalf("after a successful save of claim %s: %v, %d claims on the disk; the save went to a file no longer in place", claimN(1000).UID, err, len(got.Claims))
	}
}

// TestDamagedKeptAsideOnce: the damaged file stays in place until the
// first save, so a daemon that is killed (or crashes) before it saved
// opens the same damaged file at every start. It must be kept aside once,
// not copied again at every start of a crash loop until the disk fills.
func TestDamagedKeptAsideOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	b := writeGenerations(t, path, 3)
	b[newestSlot(b)+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s, _, err := Open(path)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("damaged checkpoint: %v", err)
		}
		s.Close() // killed before the first save
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("the same damaged file was kept aside %d times: %v", len(aside), aside)
	}
}

func FuzzRead(f *testing.F) {
	payload, _ := Encode(sampleCheckpoint())
	slot := func(gen uint64) []byte {
		return append(encodeSlot(gen, payload), make([]byte, minSlotSize-slotHeaderSize-len(payload))...)
	}
	f.Add(append(slot(2), slot(1)...))
	f.Add(slot(2))
	f.Add(payload)
	f.Add([]byte(slotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, _ := Read(b)
		if cp == nil {
			return
		}
		if err := cp.validate(); err != nil {
			t.Fatalf("returned an inconsistent checkpoint: %v", err)
		}
	})
}
