package program

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// refresh re-indexes unless another scan finished since the caller's
// snapshot of generation gen. Unless forced it is rate limited to one scan
// per rescan interval, except when a directory changed.
func (r *Repository) refresh(gen uint64, force bool) {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	idx := r.snapshot()
	if idx.generation != gen {
		return
	}
	if !force && r.now().Sub(idx.scannedAt) < r.rescanInterval && !r.dirsChanged(idx) {
		return
	}
	r.scan()
}

// dirsChanged reports whether the root moved or any directory walked by the
// last scan changed since.
func (r *Repository) dirsChanged(idx *repoIndex) bool {
	if idx.racy {
		return true
	}
	root, err := filepath.EvalSymlinks(r.dir)
	if err != nil || idx.rootErr != nil {
		return (err == nil) != (idx.rootErr == nil)
	}
	if root != idx.root {
		return true
	}
	for d, mtime := range idx.dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.ModTime().Equal(mtime) {
			return true
		}
	}
	return false
}

// scan walks the repository and publishes a new index, re-parsing only the
// files whose fingerprint changed. Callers hold scanMu.
func (r *Repository) scan() {
	start := time.Now()
	old := r.snapshot()
	idx := &repoIndex{
		files:     map[string]*fileEntry{},
		byID:      map[idKey][]*fileEntry{},
		dirs:      map[string]time.Time{},
		scannedAt: r.now(),
	}
	var oldFiles map[string]*fileEntry
	if old != nil {
		idx.generation = old.generation + 1
		oldFiles = old.files
	}
	idx.root, idx.rootErr = filepath.EvalSymlinks(r.dir)
	if idx.rootErr == nil {
		if fi, err := os.Stat(idx.root); err != nil {
			idx.rootErr = err
		} else if !fi.IsDir() {
			idx.rootErr = fmt.Errorf("%s is not a directory", r.dir)
		}
	}
	if idx.rootErr != nil {
		idx.root = ""
		if old == nil || old.rootErr == nil {
			r.logger.Info("Bitstream repository cannot be read; it stays empty until it can", "err", idx.rootErr)
		}
	} else {
		r.walk(idx, oldFiles, start)
	}
	for _, e := range idx.files {
		if e.bs == nil {
			idx.refused++
			continue
		}
		k := idKey{interfaceID: e.bs.InterfaceID, afuID: e.bs.AFUID}
		idx.byID[k] = append(idx.byID[k], e)
	}
	for _, es := range idx.byID {
		slices.SortFunc(es, preferEntry)
	}
	r.logger.V(4).Info("Indexed bitstream repository", "generation", idx.generation, "bitstreams", idx.usable(), "skipped", idx.refused, "duration", time.Since(start))
	r.mu.Lock()
	r.index = idx
	r.mu.Unlock()
}

// preferEntry orders a GBS before an AOCX, then newer before older, then by
// name.
func preferEntry(a, b *fileEntry) int {
	if (a.bs.Format == FormatGBS) != (b.bs.Format == FormatGBS) {
		if a.bs.Format == FormatGBS {
			return -1
		}
		return 1
	}
	if c := b.bs.ModTime.Compare(a.bs.ModTime); c != 0 {
		return c
	}
	return strings.Compare(a.bs.Name, b.bs.Name)
}

func (r *Repository) walk(idx *repoIndex, oldFiles map[string]*fileEntry, start time.Time) {
	root := idx.root
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			r.logger.Info("Cannot read part of the bitstream repository; skipping it", "path", p, "err", err)
			return nil
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				r.logger.Info("Cannot stat a directory of the bitstream repository; skipping it", "path", p, "err", err)
				return filepath.SkipDir
			}
			idx.dirs[p] = fi.ModTime()
			if !fi.ModTime().Before(start.Add(-racyWindow)) {
				idx.racy = true
			}
			return nil
		}
		name, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		if e := r.indexFile(root, p, name, d, oldFiles[name]); e != nil {
			idx.files[name] = e
		}
		return nil
	})
}

// indexFile returns the entry for the file at p (named name), reusing old
// when the file did not change. It returns nil for a symlink to a directory:
// the directory is indexed where it lives.
func (r *Repository) indexFile(root, p, name string, d fs.DirEntry, old *fileEntry) *fileEntry {
	path := filepath.Join(r.dir, name)
	var (
		fi  os.FileInfo
		err error
	)
	if d.Type()&fs.ModeSymlink != 0 {
		var real string
		if real, err = filepath.EvalSymlinks(p); err != nil {
			return r.refuse(name, old, fingerprint{path: path}, fmt.Errorf("%s: symlink cannot be resolved: %w", path, err))
		}
		if !within(root, real) {
			return r.refuse(name, old, fingerprint{path: real}, fmt.Errorf("%s: is a symlink to %s, outside the repository: refused; copy the file into the repository", path, real))
		}
		path = real
		if fi, err = os.Stat(real); err == nil && fi.IsDir() {
			return nil
		}
	} else {
		fi, err = d.Info()
	}
	if err != nil {
		return r.refuse(name, old, fingerprint{path: path}, fmt.Errorf("stat %s: %w", path, err))
	}
	fp := fingerprintOf(path, fi)
	if !fi.Mode().IsRegular() {
		return r.refuse(name, old, fp, invalidf("%s: is not a regular file (mode %s): a bitstream must be a regular file", path, fi.Mode()))
	}
	if old != nil && old.fp == fp {
		return old
	}
	bs, err := Open(path, r.openOpts...)
	if err != nil {
		return r.refuse(name, old, fp, err)
	}
	bs.Name, bs.repoDir = name, r.dir
	r.checkLayout(bs)
	r.logger.V(2).Info("Indexed bitstream", "name", name, "format", bs.Format, "interfaceID", bs.InterfaceID, "afuID", bs.AFUID)
	return &fileEntry{fp: fp, bs: bs}
}

// refuse records why a file is skipped and logs it when the reason is new:
// loudly for broken bitstreams, quietly for files that are no bitstream.
func (r *Repository) refuse(name string, old *fileEntry, fp fingerprint, err error) *fileEntry {
	if old == nil || old.err == nil || old.err.Error() != err.Error() {
		if isNotBitstream(err) {
			r.logger.V(2).Info("Ignoring file in bitstream repository", "name", name, "reason", err.Error())
		} else {
			r.logger.Info("Ignoring file in bitstream repository", "name", name, "reason", err.Error())
		}
	}
	return &fileEntry{fp: fp, err: err}
}

// checkLayout logs when a file in the layout <interfaceID>/<afuID>.<format>
// carries other IDs in its header; the header wins.
func (r *Repository) checkLayout(bs *Bitstream) {
	dir, file := filepath.Split(bs.Name)
	ext := filepath.Ext(file)
	if ext != "."+string(FormatGBS) && ext != "."+string(FormatAOCX) && ext != "."+string(FormatXclbin) {
		return
	}
	ifID, err1 := discovery.CanonicalID(filepath.Base(dir))
	afu, err2 := discovery.CanonicalID(strings.TrimSuffix(file, ext))
	if err1 != nil || err2 != nil {
		return
	}
	if ifID != bs.InterfaceID || afu != bs.AFUID {
		r.logger.Info("Bitstream file name disagrees with its header; indexing it by its header",
			"name", bs.Name, "nameInterfaceID", ifID, "nameAFUID", afu, "interfaceID", bs.InterfaceID, "afuID", bs.AFUID)
	}
}
