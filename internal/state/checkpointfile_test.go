package state

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
	cf, cp, err := OpenCheckpoint(path)
	if err != nil || len(cp.Claims) != 0 {
		t.Fatalf("new checkpoint: %v %+v", err, cp)
	}
	for i := 1; i <= n; i++ {
		cp.Claims[claimN(i).UID] = claimN(i)
		if err := cf.Save(cp); err != nil {
			t.Fatal(err)
		}
	}
	cf.Close()
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

func TestCheckpointFileSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
	writeGenerations(t, path, 3)
	cf, got, err := OpenCheckpoint(path)
	if err != nil || len(got.Claims) != 3 {
		t.Fatalf("reopen: %v, %d claims, want 3", err, len(got.Claims))
	}
	cf.Close()
}

// TestCheckpointFileDamage damages the newest slot in each way a crash or
// a stray write can, and checks that the older valid slot is used (never
// the damaged payload), the damage is reported and the file is kept aside.
func TestCheckpointFileDamage(t *testing.T) {
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
			path := filepath.Join(t.TempDir(), CheckpointFileName)
			b := writeGenerations(t, path, 3)
			b = tc.damage(b, newestSlot(b))
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			cf, got, err := OpenCheckpoint(path)
			if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), "last save may be lost") {
				t.Fatalf("damaged newest slot: %v, want a loud warning", err)
			}
			// The damaged file stays until the first save rewrites it.
			if err := cf.Save(got); err != nil {
				t.Fatal(err)
			}
			cf.Close()
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
			cf, again, err := OpenCheckpoint(path)
			if err != nil || len(again.Claims) != want {
				t.Fatalf("after the rewrite: %v, %d claims", err, len(again.Claims))
			}
			cf.Close()
		})
	}
}

func TestCheckpointFileNewerVersionUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
	payload := []byte(`{"version":4,"bootID":"","claims":{}}`)
	b := append(encodeSlot(1, payload), make([]byte, minSlotSize-slotHeaderSize-len(payload))...)
	b = append(b, b...)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := OpenCheckpoint(path)
	if !errors.Is(err, ErrNewerCheckpoint) || !strings.Contains(err.Error(), "run that driver release or a newer one") {
		t.Fatalf("newer checkpoint: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(b) {
		t.Fatal("a newer driver's checkpoint was changed")
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("a newer driver's checkpoint was treated as damaged: %v", aside)
	}
}

// TestCheckpointFileOfDevelopmentIsDamage: slots of the development
// format (magic FPGACKP2, a version 1 payload) are damage, not a
// checkpoint to trust: the file is kept aside and rewritten empty, and
// the caller hears of it (State then recovers holds from CDI specs).
func TestCheckpointFileOfDevelopmentIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
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
	cf, cp, err := OpenCheckpoint(path)
	if !errors.Is(err, ErrCorruptCheckpoint) || cf == nil || len(cp.Claims) != 0 {
		t.Fatalf("development checkpoint: %v, %+v; want it reported as damaged and an empty checkpoint", err, cp)
	}
	cf.Close()
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("damaged file kept aside as %v, want one copy", aside)
	}
}

func TestCheckpointFileGrows(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
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

func FuzzReadCheckpoint(f *testing.F) {
	payload, _ := EncodeCheckpoint(sampleCheckpoint())
	slot := func(gen uint64) []byte {
		return append(encodeSlot(gen, payload), make([]byte, minSlotSize-slotHeaderSize-len(payload))...)
	}
	f.Add(append(slot(2), slot(1)...))
	f.Add(slot(2))
	f.Add(payload)
	f.Add([]byte(slotMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, _, _, _ := ReadCheckpoint(b)
		if cp == nil {
			return
		}
		if err := cp.validate(); err != nil {
			t.Fatalf("returned an inconsistent checkpoint: %v", err)
		}
	})
}

// TestCheckpointFileWriteModes saves through each way of writing (on the
// O_DIRECT descriptor where this system allows it, through native AIO for
// a caller that overlaps the write and pwritev2 for one that does not, and
// the O_DSYNC write they fall back to) and reads every generation back
// whole, from a file that keeps its two slots.
func TestCheckpointFileWriteModes(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		overlap    bool
	}{
		{"direct", "direct", false},
		{"direct, overlapped", "direct", true},
		{"synchronous", "synchronous", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), CheckpointFileName)
			cf, cp, err := OpenCheckpoint(path)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cf.Close() }()
			switch got := cf.WriteMode(); {
			case tc.mode == "synchronous":
				cf.closeAIO(errors.New("turned off by the test"))
				if got := cf.WriteMode(); got != "synchronous: turned off by the test" {
					t.Fatalf("write mode %q after closeAIO", got)
				}
			case got != tc.mode:
				t.Skipf("this system writes the checkpoint %s", got)
			}
			for i := 1; i <= 5; i++ {
				cp.Claims[claimN(i).UID] = claimN(i)
				if err := saveOverlapped(cf, cp, tc.overlap); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				got, gen, slotSize, err := ReadCheckpoint(b)
				if err != nil || len(got.Claims) != i || gen != cf.gen || slotSize != cf.slotSize {
					t.Fatalf("after save %d: %v, %d claims, generation %d of %d, slots of %d bytes (file %d bytes)", i, err, len(got.Claims), gen, cf.gen, slotSize, len(b))
				}
			}
			if got := cf.WriteMode(); !strings.HasPrefix(got, tc.mode) {
				t.Fatalf("saves fell back: write mode %q, want %s", got, tc.mode)
			}
			// Only a submitted write fills in the iocb: a save that does
			// not overlap must not have gone through native AIO, nor one
			// that does through pwritev2.
			if cf.aio != nil && (cf.aio.cb.nbytes != 0) != tc.overlap {
				t.Fatalf("overlap %v, yet the iocb holds %d bytes", tc.overlap, cf.aio.cb.nbytes)
			}
		})
	}
}

// openDirect opens a new checkpoint file at path, closed when the test
// ends; the test is skipped unless the file is written directly.
func openDirect(t *testing.T) (cf *CheckpointFile, cp *Checkpoint, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), CheckpointFileName)
	cf, cp, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cf.Close() })
	if got := cf.WriteMode(); got != "direct" {
		t.Skipf("this system writes the checkpoint %s", got)
	}
	return cf, cp, path
}

// saveOverlapped saves cp as a flush does: start, then wait.
func saveOverlapped(cf *CheckpointFile, cp *Checkpoint, overlap bool) error {
	wait, err := cf.start(cp, overlap)
	if err != nil {
		return err
	}
	return wait()
}

// TestCheckpointFileDirectWriteFallsBack: a synchronous direct write that
// the system refuses (EINVAL: here a buffer O_DIRECT cannot use) is made
// once through the O_DSYNC descriptor, and the saves after it stay there.
func TestCheckpointFileDirectWriteFallsBack(t *testing.T) {
	cf, cp, path := openDirect(t)
	// One byte past an aligned buffer, with room for a slot: fill keeps
	// it, and pwritev2 on the O_DIRECT descriptor fails with EINVAL.
	b := alignedBuffer(int(cf.slotSize) + directAlign)
	cf.aio.buf = b[1 : 1+directAlign : len(b)]
	for i := 1; i <= 3; i++ {
		cp.Claims[claimN(i).UID] = claimN(i)
		if err := saveOverlapped(cf, cp, false); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, gen, _, err := ReadCheckpoint(raw)
		if err != nil || len(got.Claims) != i || gen != cf.gen {
			t.Fatalf("after save %d: %v, %d claims, generation %d of %d", i, err, len(got.Claims), gen, cf.gen)
		}
	}
	if got := cf.WriteMode(); !strings.HasPrefix(got, "synchronous: ") || !strings.Contains(got, "invalid argument") {
		t.Fatalf("write mode %q, want the O_DSYNC write and why", got)
	}
}

// TestCheckpointFileGrowthFailingLate: a save that outgrows the slots
// replaces the file and then fails (the directory's fsync fails after
// the rename). The saves after it must reach the file that is in place,
// not the replaced one, which a restart never reads.
func TestCheckpointFileGrowthFailingLate(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
	cf, cp, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	cp.Claims[claimN(0).UID] = claimN(0)
	if err := cf.Save(cp); err != nil {
		t.Fatal(err)
	}
	cf.rename = func(oldpath, newpath string) error {
		if err := os.Rename(oldpath, newpath); err != nil {
			return err
		}
		return errors.New("fsync directory: input/output error")
	}
	for i := 0; i < 600; i++ { // past the first slot size
		cp.Claims[claimN(i).UID] = claimN(i)
	}
	if err := cf.Save(cp); err == nil {
		t.Fatal("a save whose rewrite failed reported success")
	}
	cf.rename = nil
	cp = newCheckpoint()
	cp.Claims[claimN(1000).UID] = claimN(1000)
	if err := cf.Save(cp); err != nil {
		t.Fatal(err)
	}
	_, got, err := OpenCheckpoint(path)
	if err != nil || len(got.Claims) != 1 || got.Claims[claimN(1000).UID] == nil {
		t.Fatalf("after a successful save of claim %s: %v, %d claims on the disk; the save went to a file no longer in place", claimN(1000).UID, err, len(got.Claims))
	}
}

// TestDamagedCheckpointKeptAsideOnce: the damaged file now stays in place
// until the first save, so a daemon that is killed (or crashes) before
// Restore saved opens the same damaged file at every start. It must be
// kept aside once, not copied again at every start of a crash loop until
// the disk the kubelet's directory lives on fills up.
func TestDamagedCheckpointKeptAsideOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), CheckpointFileName)
	b := writeGenerations(t, path, 3)
	b[newestSlot(b)+20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cf, _, err := OpenCheckpoint(path)
		if !errors.Is(err, ErrCorruptCheckpoint) {
			t.Fatalf("damaged checkpoint: %v", err)
		}
		cf.Close() // killed before the first save
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("the same damaged file was kept aside %d times: %v", len(aside), aside)
	}
}

// TestAIOWaitTakesItsOwnEvent: a wait whose eventfd read fails still
// waits for its write and takes its event, so that no later wait takes a
// write's event for its own (and a failed write for a done one).
func TestAIOWaitTakesItsOwnEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "aio")
	if err := os.WriteFile(path, make([]byte, 2*directAlign), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := openAIO(path)
	if err != nil {
		t.Skipf("no asynchronous writes here: %v", err)
	}
	defer w.close()
	// Every read of the eventfd fails from now on.
	if err := w.done.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.submit([]byte{byte(i + 1)}, int64(i)*directAlign); err != nil {
			t.Fatal(err)
		}
		if err := w.wait(); err != nil {
			t.Fatalf("wait %d: %v", i+1, err)
		}
	}
	var ev ioEvent
	timeout := unix.Timespec{}
	n, _, errno := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(w.ctx), 0, 1, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&timeout)), 0)
	if errno != 0 || n != 0 {
		t.Fatalf("events left after every write was waited for: %d (%v)", n, errno)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 1 || b[directAlign] != 2 {
		t.Fatalf("file starts its blocks with %d and %d, want 1 and 2", b[0], b[directAlign])
	}
}

// TestCheckpointFileWriteAfterFailedWait: a save after one whose wait
// failed before taking its write's event (here: never called) neither
// overwrites the buffer of that write, which the kernel may still read,
// nor leaves its event for a later wait to take for its own write's.
func TestCheckpointFileWriteAfterFailedWait(t *testing.T) {
	cf, cp, _ := openDirect(t)
	cp.Claims[claimN(1).UID] = claimN(1)
	if _, err := cf.start(cp, true); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		cp.Claims[claimN(i).UID] = claimN(i)
		if err := saveOverlapped(cf, cp, true); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
	}
	// Every write but the abandoned one was waited for: no event is left
	// once they have all ended.
	var ev ioEvent
	timeout := unix.Timespec{Nsec: int64(200 * time.Millisecond)}
	n, _, errno := unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(cf.aio.ctx), 1, 1, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&timeout)), 0)
	if errno != 0 || n != 0 {
		t.Fatalf("an event left after every write was waited for: %d (%v): a wait took another write's event", n, errno)
	}
}
