package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// The checkpoint file holds two slots of slotSize bytes. A save writes the
// encoded checkpoint into the older slot in place and flushes it with
// fdatasync: one data flush instead of a temporary file, its fsync, a
// rename and a directory fsync, which keeps a prepare well under a
// millisecond. A torn write can only damage the slot being written; load
// takes the newest slot whose checksum holds. Each slot is:
//
//	magic "FPGACKP2" | generation uint64 LE | length uint32 LE |
//	sha256 of the payload (32 bytes) | payload (EncodeCheckpoint's bytes)
const (
	slotMagic       = "FPGACKP2"
	slotHeaderSize  = 8 + 8 + 4 + 32
	minSlotSize     = 64 << 10
	maxCheckpointSz = 64 << 20
)

// CheckpointFile is an open two-slot checkpoint file. It is not safe for
// concurrent use; State serializes saves.
type CheckpointFile struct {
	path     string
	f        *os.File
	slotSize int64
	gen      uint64
}

type slot struct {
	gen     uint64
	payload []byte
	valid   bool
}

// parseSlot reads one slot; valid means its magic and checksum hold.
func parseSlot(b []byte) slot {
	if len(b) < slotHeaderSize || string(b[:8]) != slotMagic {
		return slot{}
	}
	s := slot{gen: binary.LittleEndian.Uint64(b[8:16])}
	n := int64(binary.LittleEndian.Uint32(b[16:20]))
	if n > int64(len(b)-slotHeaderSize) {
		return s
	}
	s.payload = b[slotHeaderSize : slotHeaderSize+n]
	sum := sha256.Sum256(s.payload)
	s.valid = bytes.Equal(sum[:], b[20:52])
	return s
}

// ReadCheckpoint decodes a checkpoint file's bytes: the two-slot format, or
// a single envelope as earlier versions wrote it. It returns the newest
// consistent checkpoint and its generation. When the newest data is damaged
// it returns what it could recover together with an error wrapping
// ErrCorruptCheckpoint.
func ReadCheckpoint(b []byte) (*Checkpoint, uint64, error) {
	if !bytes.HasPrefix(b, []byte(slotMagic)) {
		cp, err := DecodeCheckpoint(b)
		return cp, 0, err
	}
	half := len(b) / 2
	if half < slotHeaderSize || len(b)%2 != 0 {
		return nil, 0, fmt.Errorf("%w: %d bytes is not two checkpoint slots", ErrCorruptCheckpoint, len(b))
	}
	a, c := parseSlot(b[:half]), parseSlot(b[half:])
	newest, other := a, c
	if c.gen > a.gen {
		newest, other = c, a
	}
	// The newest slot, when consistent, is the checkpoint. Otherwise what
	// can be decoded is returned with a loud error, newest first: holding a
	// device too many only refuses claims until it is unprepared, holding
	// one too few risks a double allocation.
	for i, s := range []slot{newest, other} {
		if s.payload == nil {
			continue
		}
		cp, err := DecodeCheckpoint(s.payload)
		switch {
		case cp == nil:
			continue
		case i == 0 && s.valid && err == nil:
			return cp, s.gen, nil
		case err == nil && s.valid:
			return cp, s.gen, fmt.Errorf("%w: the newest slot (generation %d) cannot be read; using generation %d, so the last save may be lost", ErrCorruptCheckpoint, newest.gen, s.gen)
		case err == nil:
			err = errors.New("slot checksum mismatch")
		}
		if !errors.Is(err, ErrCorruptCheckpoint) {
			err = fmt.Errorf("%w: %v", ErrCorruptCheckpoint, err)
		}
		return cp, s.gen, fmt.Errorf("generation %d damaged, recovered what decodes: %w", s.gen, err)
	}
	return nil, 0, fmt.Errorf("%w: neither checkpoint slot can be read", ErrCorruptCheckpoint)
}

// OpenCheckpoint opens (creating it when missing) the checkpoint at path
// and loads it. A corrupt file is moved aside to path.corrupt-<time>, never
// deleted, and what could be recovered is returned with an error wrapping
// ErrCorruptCheckpoint; other errors are fatal.
func OpenCheckpoint(path string) (*CheckpointFile, *Checkpoint, error) {
	cp := &Checkpoint{Claims: map[string]*ClaimRecord{}}
	var gen uint64
	var warning error
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	default:
		loaded, g, err := ReadCheckpoint(b)
		if err != nil && !errors.Is(err, ErrCorruptCheckpoint) {
			return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
		}
		if loaded != nil {
			cp, gen = loaded, g
		}
		if cp.Claims == nil {
			cp.Claims = map[string]*ClaimRecord{}
		}
		if err != nil {
			aside := fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000000000"))
			if rerr := os.Rename(path, aside); rerr != nil {
				return nil, nil, fmt.Errorf("checkpoint %s is corrupt (%v) and could not be moved aside: %w", path, err, rerr)
			}
			warning = fmt.Errorf("checkpoint %s: %w; kept as %s, recovered %d claims", path, err, aside, len(cp.Claims))
		} else if bytes.HasPrefix(b, []byte(slotMagic)) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return nil, nil, fmt.Errorf("open checkpoint %s: %w", path, err)
			}
			return &CheckpointFile{path: path, f: f, slotSize: int64(len(b) / 2), gen: gen}, cp, nil
		}
	}
	// Missing, in the old format, or moved aside: write a new file.
	cf := &CheckpointFile{path: path, gen: gen}
	if err := cf.rewrite(cp, minSlotSize); err != nil {
		return nil, nil, err
	}
	return cf, cp, warning
}

// Save writes cp into the older slot and flushes it.
func (cf *CheckpointFile) Save(cp *Checkpoint) error {
	payload, err := EncodeCheckpoint(cp)
	if err != nil {
		return err
	}
	if int64(len(payload)) > cf.slotSize-slotHeaderSize {
		size := cf.slotSize
		for int64(len(payload)) > size-slotHeaderSize {
			size *= 2
		}
		if size > maxCheckpointSz {
			return fmt.Errorf("checkpoint of %d bytes exceeds %d", len(payload), maxCheckpointSz)
		}
		return cf.rewrite(cp, size)
	}
	gen := cf.gen + 1
	off := int64(gen%2) * cf.slotSize
	if _, err := cf.f.WriteAt(encodeSlot(gen, payload), off); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", cf.path, err)
	}
	if err := unix.Fdatasync(int(cf.f.Fd())); err != nil {
		return fmt.Errorf("flush checkpoint %s: %w", cf.path, err)
	}
	cf.gen = gen
	return nil
}

// rewrite replaces the file atomically with both slots holding cp, each of
// size bytes: for a new file, a migration and a checkpoint outgrowing its
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
	if err := atomicfile.Write(cf.path, buf, atomicfile.Options{Perm: 0o600}); err != nil {
		return err
	}
	f, err := os.OpenFile(cf.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w", cf.path, err)
	}
	if cf.f != nil {
		cf.f.Close()
	}
	cf.f, cf.slotSize, cf.gen = f, size, gen
	return nil
}

func encodeSlot(gen uint64, payload []byte) []byte {
	b := make([]byte, slotHeaderSize+len(payload))
	copy(b, slotMagic)
	binary.LittleEndian.PutUint64(b[8:], gen)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(payload)))
	sum := sha256.Sum256(payload)
	copy(b[20:], sum[:])
	copy(b[slotHeaderSize:], payload)
	return b
}

// Close releases the file.
func (cf *CheckpointFile) Close() error {
	if cf.f == nil {
		return nil
	}
	return cf.f.Close()
}
