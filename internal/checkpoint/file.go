package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

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
