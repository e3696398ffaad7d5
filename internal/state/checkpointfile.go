package state

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
// encoded checkpoint into the older slot in place, as one durable write,
// instead of a temporary file, its fsync, a rename and a directory fsync:
// on an O_DIRECT descriptor with RWF_DSYNC where the system allows it
// (through Linux native AIO when the caller does other work while the disk
// flushes, see aioWriter), else through a descriptor opened with O_DSYNC.
// A torn write can only damage the slot being written; load takes the
// newest slot whose checksum holds. Each slot is:
//
//	magic "FPGACKP3" | generation uint64 LE | length uint32 LE |
//	sha256 of generation, length and payload (32 bytes) | payload
//
// The checksum covers the generation, so that a damaged generation can
// never make an older slot pass for the newest. (Magic "FPGACKP2", a
// checksum of the payload alone, was written only during development and
// is not read.)
const (
	slotMagic       = "FPGACKP3"
	slotHeaderSize  = 8 + 8 + 4 + 32
	minSlotSize     = 64 << 10
	maxCheckpointSz = 64 << 20
)

// CheckpointFileName is the checkpoint's file name in the plugin data
// directory.
const CheckpointFileName = "checkpoint.json"

// CheckpointFile is an open two-slot checkpoint file. It is not safe for
// concurrent use; State serializes saves.
type CheckpointFile struct {
	path     string
	f        *os.File
	slotSize int64
	gen      uint64
	// noFlush leaves the flush out (see Config.SkipSync).
	noFlush bool
	// aio writes on the O_DIRECT descriptor, opened at the first save
	// that flushes (or WriteMode); nil before, or when off, and then
	// aioOff says why.
	aio    *aioWriter
	aioOff error
	// rename, when set, replaces os.Rename in rewrite (tests).
	rename func(oldpath, newpath string) error
}

type slot struct {
	gen     uint64
	payload []byte
	valid   bool
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
// every slot size Save can choose (a power of two from minSlotSize) below
// n, so that a file that was truncated or extended still shows its second
// slot.
func slotOffsets(n int64) []int64 {
	offs := []int64{0}
	for size := int64(minSlotSize); size < n && size <= maxCheckpointSz/2; size *= 2 {
		offs = append(offs, size)
	}
	return offs
}

// ReadCheckpoint decodes a checkpoint file's bytes. It returns the
// checkpoint of the newest slot whose checksum holds and that decodes, its
// generation and the file's slot size. When anything about the file is
// damaged (a slot that fails its checksum or does not decode, a missing
// slot, a file of the wrong size) the checkpoint it returns comes from the
// valid slot alone (never from a damaged one) and the error wraps
// ErrCorruptCheckpoint and says what was found: the last save may be lost,
// and the caller must look for other evidence of prepared claims. A slot
// written by a newer driver fails with ErrNewerCheckpoint and nothing else
// is returned.
func ReadCheckpoint(b []byte) (*Checkpoint, uint64, int64, error) {
	n := int64(len(b))
	type found struct {
		off int64
		s   slot
		cp  *Checkpoint
		err error
	}
	var slots []found
	var damage []string
	for _, off := range slotOffsets(n) {
		if off > 0 && !isSlot(b[off:]) {
			continue
		}
		f := found{off: off, s: parseSlot(b[off:])}
		switch {
		case off == 0 && !isSlot(b):
			damage = append(damage, "the first slot's header is missing or overwritten")
			continue
		case !f.s.valid:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) fails its checksum", off, f.s.gen))
			continue
		}
		f.cp, f.err = DecodeCheckpoint(f.s.payload)
		switch {
		case errors.Is(f.err, ErrNewerCheckpoint):
			return nil, 0, 0, f.err
		case f.cp == nil:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) does not decode: %v", off, f.s.gen, f.err))
			continue
		case f.err != nil:
			damage = append(damage, fmt.Sprintf("the slot at byte %d (generation %d) is inconsistent: %v", off, f.s.gen, f.err))
		}
		slots = append(slots, f)
	}
	var best *found
	for i := range slots {
		if best == nil || slots[i].s.gen > best.s.gen {
			best = &slots[i]
		}
	}
	slotSize := n / 2
	switch {
	case best == nil:
		damage = append(damage, "no slot can be read")
		return newCheckpoint(), 0, 0, fmt.Errorf("%w: %s", ErrCorruptCheckpoint, strings.Join(damage, "; "))
	case len(slots) == 1 && len(damage) == 0:
		damage = append(damage, "only one slot was found")
	}
	if len(damage) == 0 && (slots[1].off != slotSize || n%2 != 0 || slotSize < minSlotSize) {
		damage = append(damage, fmt.Sprintf("the file has %d bytes, not two slots of %d", n, slots[1].off))
	}
	if len(damage) > 0 {
		return best.cp, best.s.gen, 0, fmt.Errorf("%w: %s; using generation %d, so the last save may be lost", ErrCorruptCheckpoint, strings.Join(damage, "; "), best.s.gen)
	}
	return best.cp, best.s.gen, slotSize, nil
}

// OpenCheckpoint opens (creating it when missing) the checkpoint at path
// and loads it. A damaged file is copied to path.corrupt-<time>, never
// deleted, and rewritten at the first save (State's is Restore's, once
// what it recovered is in the checkpoint); the returned
// error then wraps ErrCorruptCheckpoint and the caller must treat the
// checkpoint as possibly incomplete. A checkpoint of a newer driver is
// left untouched and fails with ErrNewerCheckpoint; other errors are
// fatal too.
func OpenCheckpoint(path string) (*CheckpointFile, *Checkpoint, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		cf := &CheckpointFile{path: path}
		cp := newCheckpoint()
		if err := cf.rewrite(cp, minSlotSize); err != nil {
			return nil, nil, err
		}
		return cf, cp, nil
	case err != nil:
		return nil, nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	cp, gen, slotSize, err := ReadCheckpoint(b)
	switch {
	case errors.Is(err, ErrNewerCheckpoint):
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	case err == nil:
		cf := &CheckpointFile{path: path, slotSize: slotSize, gen: gen}
		if err := cf.reopen(); err != nil {
			return nil, nil, err
		}
		return cf, cp, nil
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
	// The damaged file stays in place until the first save rewrites it
	// (slotSize 0): rewritten now, a kill before the caller recorded what
	// it recovers elsewhere would leave a sound checkpoint without it.
	cf := &CheckpointFile{path: path, gen: gen}
	if werr := cf.reopen(); werr != nil {
		return nil, nil, fmt.Errorf("checkpoint %s is damaged (%v): %w", path, err, werr)
	}
	return cf, cp, fmt.Errorf("checkpoint %s: %w; the damaged file is kept as %s", path, err, aside)
}

// keptAside returns the copy of the damaged checkpoint b at path that an
// earlier OpenCheckpoint kept aside, or "" when there is none.
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

// Save writes cp into the older slot; it is on the disk when Save returns
// (unless the flush is off).
func (cf *CheckpointFile) Save(cp *Checkpoint) error {
	wait, err := cf.start(cp, false)
	if err != nil {
		return err
	}
	return wait()
}

// start begins Save: cp is on the disk once wait returns nil. Between the
// two the caller may do other work; it must call wait before anything
// else of cf. overlap says it has such work: the write then runs
// asynchronously where it can. Without, it is written before start
// returns, synchronously (see aioWriter): start returns its error, and
// wait nil.
func (cf *CheckpointFile) start(cp *Checkpoint, overlap bool) (wait func() error, err error) {
	done := func() error { return nil }
	payload, err := EncodeCheckpoint(cp)
	if err != nil {
		return nil, err
	}
	if int64(len(payload)) > cf.slotSize-slotHeaderSize {
		size := max(cf.slotSize, minSlotSize)
		for int64(len(payload)) > size-slotHeaderSize {
			size *= 2
		}
		if size > maxCheckpointSz {
			return nil, fmt.Errorf("checkpoint of %d bytes exceeds %d", len(payload), maxCheckpointSz)
		}
		return done, cf.rewrite(cp, size)
	}
	gen := cf.gen + 1
	off := int64(gen%2) * cf.slotSize
	b := encodeSlot(gen, payload)
	if cf.aio != nil && cf.aio.busy {
		// A wait failed before taking its write's event: closing waits
		// for the write, whose buffer the next one would overwrite.
		cf.closeAIO(nil)
	}
	cf.openAIO()
	switch {
	case cf.aio == nil:
		return done, cf.write(b, off, gen)
	case !overlap:
		return done, cf.directEnded(cf.aio.write(b, off), b, off, gen)
	}
	if err := cf.aio.submit(b, off); err != nil {
		return done, cf.directEnded(err, b, off, gen)
	}
	return func() error { return cf.directEnded(cf.aio.wait(), b, off, gen) }, nil
}

// directEnded ends a direct write of slot b of generation gen at off that
// ended with err: a failure the system's refusal explains (unsupported)
// closes the direct writer for good and writes b through the O_DSYNC
// descriptor instead.
func (cf *CheckpointFile) directEnded(err error, b []byte, off int64, gen uint64) error {
	switch {
	case err == nil:
		cf.gen = gen
		return nil
	case !unsupported(err):
		return fmt.Errorf("write checkpoint %s: %w", cf.path, err)
	}
	cf.closeAIO(err)
	return cf.write(b, off, gen)
}

// write writes slot b of generation gen at off through the O_DSYNC
// descriptor.
func (cf *CheckpointFile) write(b []byte, off int64, gen uint64) error {
	if _, err := cf.f.WriteAt(b, off); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", cf.path, err)
	}
	cf.gen = gen
	return nil
}

// openAIO opens the direct writer unless it is open, was tried, or
// saves do not flush.
func (cf *CheckpointFile) openAIO() {
	if cf.aio != nil || cf.aioOff != nil || cf.noFlush {
		return
	}
	cf.aio, cf.aioOff = openAIO(cf.path)
}

// closeAIO closes the direct writer. With a reason, writes stay
// synchronous for good; without, the next save opens the writer again.
func (cf *CheckpointFile) closeAIO(reason error) {
	if cf.aio != nil {
		cf.aio.close()
		cf.aio = nil
	}
	cf.aioOff = reason
}

// WriteMode says how saves reach the disk: "direct" (on an O_DIRECT
// descriptor, through native AIO where the caller overlaps the write),
// "synchronous: <why not direct>" (an O_DSYNC descriptor), or "not
// flushed".
func (cf *CheckpointFile) WriteMode() string {
	cf.openAIO()
	switch {
	case cf.noFlush:
		return "not flushed"
	case cf.aio != nil:
		return "direct"
	}
	return fmt.Sprintf("synchronous: %v", cf.aioOff)
}

// reopen opens the file for Save: with O_DSYNC, so that a write returns
// once it is on the disk, unless noFlush (the direct writer opens at the
// next save).
func (cf *CheckpointFile) reopen() error {
	flags := os.O_RDWR
	if !cf.noFlush {
		flags |= unix.O_DSYNC
	}
	f, err := os.OpenFile(cf.path, flags, 0)
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w", cf.path, err)
	}
	if cf.f != nil {
		cf.f.Close()
	}
	cf.f = f
	cf.closeAIO(nil) // it writes the file this one replaced
	return nil
}

// setFlush says whether Save flushes to the disk (see Config.SkipSync).
func (cf *CheckpointFile) setFlush(flush bool) error {
	if cf.noFlush == !flush {
		return nil
	}
	cf.noFlush = !flush
	return cf.reopen()
}

// rewrite replaces the file atomically with both slots holding cp, each of
// size bytes: for a new file, a damaged one and a checkpoint outgrowing its
// slots.
func (cf *CheckpointFile) rewrite(cp *Checkpoint, size int64) error {
	payload, err := EncodeCheckpoint(cp)
	if err != nil {
		return err
	}
	buf := make([]byte, 2*size)
	gen := cf.gen + 1
	copy(buf[(gen%2)*uint64(size):], encodeSlot(gen, payload))
	copy(buf[((gen+1)%2)*uint64(size):], encodeSlot(gen-1, payload))
	if err := atomicfile.Write(cf.path, buf, atomicfile.Options{Perm: 0o600, NoSync: cf.noFlush, Rename: cf.rename}); err != nil {
		// The new file may be in place already (its directory's fsync
		// failed): the next save rewrites it, never writing the one
		// open, which a restart may not read.
		cf.slotSize = 0
		return err
	}
	if err := cf.reopen(); err != nil {
		cf.slotSize = 0
		return err
	}
	cf.slotSize, cf.gen = size, gen
	return nil
}

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

// Close releases the file.
func (cf *CheckpointFile) Close() error {
	cf.closeAIO(nil)
	if cf.f == nil {
		return nil
	}
	return cf.f.Close()
}
