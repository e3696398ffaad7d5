package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// The checkpoint file holds two slots of slotSize bytes. A save writes the
// encoded checkpoint into the older slot in place, with one write and one
// fdatasync; a torn write can only damage the slot being written, and a
// load takes the newest slot whose checksum holds. Each slot is:
//
//	magic "FPGACKP3" | generation uint64 LE | length uint32 LE |
//	sha256 of generation, length and payload (32 bytes) | payload
//
// The checksum covers the generation, so that a damaged generation can
// never make an older slot pass for the newest. (Magic "FPGACKP2", a
// checksum of the payload alone, was written only during development and
// is not read.)
const (
	slotMagic      = "FPGACKP3"
	slotHeaderSize = 8 + 8 + 4 + 32
	minSlotSize    = 64 << 10
	maxSize        = 64 << 20
)

type slot struct {
	gen     uint64
	payload []byte
	valid   bool
}

// encodeSlot is the slot of generation gen holding payload.
func encodeSlot(gen uint64, payload []byte) []byte {
	b := make([]byte, slotHeaderSize+len(payload))
	copy(b, slotMagic)
	binary.LittleEndian.PutUint64(b[8:], gen)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(payload)))
	sum := slotChecksum(b[8:20], payload)
	copy(b[20:], sum[:])
	copy(b[slotHeaderSize:], payload)
	return b
}

// parseSlot reads one slot; valid means its magic and checksum hold.
func parseSlot(b []byte) slot {
	if len(b) < slotHeaderSize || !isSlot(b) {
		return slot{}
	}
	s := slot{gen: binary.LittleEndian.Uint64(b[8:16])}
	n := int64(binary.LittleEndian.Uint32(b[16:20]))
	if n > int64(len(b)-slotHeaderSize) {
		return s
	}
	s.payload = b[slotHeaderSize : slotHeaderSize+n]
	sum := slotChecksum(b[8:20], s.payload)
	s.valid = bytes.Equal(sum[:], b[20:52])
	return s
}

// isSlot reports whether b starts with a slot's magic.
func isSlot(b []byte) bool { return bytes.HasPrefix(b, []byte(slotMagic)) }

// slotChecksum is the checksum of a slot: its generation and length (the
// 12 header bytes after the magic) and its payload.
func slotChecksum(genLen, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(genLen)
	h.Write(payload)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// slotOffsets lists where a slot may start in a file of n bytes: 0, and
// every slot size a save can choose (a power of two from minSlotSize)
// below n, so that a file that was truncated or extended still shows its
// second slot.
func slotOffsets(n int64) []int64 {
	offs := []int64{0}
	for size := int64(minSlotSize); size < n && size <= maxSize/2; size *= 2 {
		offs = append(offs, size)
	}
	return offs
}

// Read decodes a checkpoint file's bytes: the checkpoint of the newest
// slot whose checksum holds and that decodes. When anything about the
// file is damaged, the checkpoint comes from a valid slot alone and the
// error wraps ErrCorrupt and says what was found: the last save may be
// lost. A slot written by a newer driver fails with ErrNewer.
func Read(b []byte) (*Checkpoint, error) {
	cp, _, _, err := read(b)
	return cp, err
}

// found is a slot read at off that holds a checkpoint.
type found struct {
	off int64
	gen uint64
	cp  *Checkpoint
}

// read is Read that also returns the newest slot's generation and the
// file's slot size (0 when the file is damaged).
func read(b []byte) (*Checkpoint, uint64, int64, error) {
	slots, damage, err := readSlots(b)
	if err != nil {
		return nil, 0, 0, err
	}
	if len(slots) == 0 {
		damage = append(damage, "no slot can be read")
		return New(), 0, 0, fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(damage, "; "))
	}
	best := slots[0]
	for _, f := range slots[1:] {
		if f.gen > best.gen {
			best = f
		}
	}
	n := int64(len(b))
	switch {
	case len(damage) > 0:
	case len(slots) == 1:
		damage = append(damage, "only one slot was found")
	case slots[1].off != n/2 || n%2 != 0 || n/2 < minSlotSize:
		damage = append(damage, fmt.Sprintf("the file has %d bytes, not two slots of %d", n, slots[1].off))
	}
	if len(damage) > 0 {
		return best.cp, best.gen, 0, fmt.Errorf("%w: %s; using generation %d, so the last save may be lost", ErrCorrupt, strings.Join(damage, "; "), best.gen)
	}
	return best.cp, best.gen, n / 2, nil
}

// readSlots returns the slots of b that hold a checkpoint and what is
// damaged; a slot of a newer driver fails with ErrNewer.
func readSlots(b []byte) ([]found, []string, error) {
	var slots []found
	var damage []string
	for _, off := range slotOffsets(int64(len(b))) {
		if off > 0 && !isSlot(b[off:]) {
			continue
		}
		s := parseSlot(b[off:])
		switch {
		case off == 0 && !isSlot(b):
			damage = append(damage, "the first slot's header is missing or overwritten")
			continue
		case !s.valid:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) fails its checksum", off, s.gen))
			continue
		}
		cp, err := Decode(s.payload)
		switch {
		case errors.Is(err, ErrNewer):
			return nil, nil, err
		case cp == nil:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) does not decode: %v", off, s.gen, err))
			continue
		case err != nil:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) is inconsistent: %v", off, s.gen, err))
		}
		slots = append(slots, found{off: off, gen: s.gen, cp: cp})
	}
	return slots, damage, nil
}

// FileName is the checkpoint's file name in the plugin data directory.
const FileName = "checkpoint.json"

// file is an open two-slot checkpoint file. It is not safe for concurrent
// use: the Store runs one flush at a time.
type file struct {
	path     string
	f        *os.File
	slotSize int64 // 0: the next save rewrites the file
	gen      uint64
	closed   bool
	// rename, when set, replaces os.Rename in rewrite (tests).
	rename func(oldpath, newpath string) error
}

// load opens (creating it when missing) the checkpoint file at path and
// reads it. A damaged file is copied to path.corrupt-<time>, never
// deleted, and left in place until the first save rewrites it; the error
// then wraps ErrCorrupt. A newer driver's file is left untouched and
// fails with ErrNewer.
func load(path string) (*file, *Checkpoint, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f := &file{path: path}
		cp := New()
		if err := f.save(cp); err != nil {
			return nil, nil, err
		}
		return f, cp, nil
	case err != nil:
		return nil, nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	cp, gen, slotSize, err := read(b)
	if errors.Is(err, ErrNewer) {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	f := &file{path: path, gen: gen, slotSize: slotSize}
	if err == nil {
		return f, cp, f.reopen()
	}
	// A start killed before its first save finds the same damaged file
	// again: it was kept aside then.
	aside := keptAside(path, b)
	if aside == "" {
		aside = fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000"))
		if werr := atomicfile.Write(aside, b, atomicfile.Options{Perm: 0o600}); werr != nil {
			return nil, nil, fmt.Errorf("checkpoint %s is damaged (%v) and could not be kept aside: %w", path, err, werr)
		}
	}
	if werr := f.reopen(); werr != nil {
		return nil, nil, fmt.Errorf("checkpoint %s is damaged (%v): %w", path, err, werr)
	}
	return f, cp, fmt.Errorf("checkpoint %s: %w; the damaged file is kept as %s", path, err, aside)
}

// keptAside returns the copy of the damaged checkpoint b at path that an
// earlier load kept aside, or "" when there is none.
func keptAside(path string, b []byte) string {
	copies, _ := filepath.Glob(path + ".corrupt-*")
	for i := len(copies) - 1; i >= 0; i-- {
		if fi, err := os.Lstat(copies[i]); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(b)) {
			continue
		}
		if kept, err := os.ReadFile(copies[i]); err == nil && bytes.Equal(kept, b) {
			return copies[i]
		}
	}
	return ""
}

// save writes cp into the older slot and flushes it to the disk; a
// checkpoint outgrowing its slots, or a damaged file, is replaced whole.
func (f *file) save(cp *Checkpoint) error {
	if f.closed {
		return fmt.Errorf("write checkpoint %s: %w", f.path, os.ErrClosed)
	}
	payload, err := Encode(cp)
	if err != nil {
		return err
	}
	if need := int64(slotHeaderSize + len(payload)); need > f.slotSize {
		size := max(f.slotSize, minSlotSize)
		for need > size {
			size *= 2
		}
		if size > maxSize {
			return fmt.Errorf("checkpoint of %d bytes exceeds %d: release claims on this node", len(payload), maxSize)
		}
		return f.rewrite(payload, size)
	}
	gen := f.gen + 1
	if _, err := f.f.WriteAt(encodeSlot(gen, payload), int64(gen%2)*f.slotSize); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", f.path, err)
	}
	if err := unix.Fdatasync(int(f.f.Fd())); err != nil {
		return fmt.Errorf("flush checkpoint %s: %w", f.path, err)
	}
	f.gen = gen
	return nil
}

// rewrite replaces the file atomically with both slots holding payload,
// each of size bytes.
func (f *file) rewrite(payload []byte, size int64) error {
	buf := make([]byte, 2*size)
	gen := f.gen + 1
	copy(buf[(gen%2)*uint64(size):], encodeSlot(gen, payload))
	copy(buf[((gen+1)%2)*uint64(size):], encodeSlot(gen-1, payload))
	// Until it succeeds, the next save rewrites again: the new file may
	// be in place already (its directory's fsync failed), and the one
	// open is no longer what a restart reads.
	f.slotSize = 0
	if err := atomicfile.Write(f.path, buf, atomicfile.Options{Perm: 0o600, Rename: f.rename}); err != nil {
		return err
	}
	if err := f.reopen(); err != nil {
		return err
	}
	f.slotSize, f.gen = size, gen
	return nil
}

// reopen opens the file in place for writing.
func (f *file) reopen() error {
	nf, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w", f.path, err)
	}
	if f.f != nil {
		f.f.Close()
	}
	f.f = nf
	return nil
}

// close releases the file; saves fail afterwards.
func (f *file) close() error {
	f.closed = true
	if f.f == nil {
		return nil
	}
	return f.f.Close()
}
