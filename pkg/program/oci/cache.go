package oci

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
)

// cache is the content-addressed store behind a Puller:
//
//	DIR/blobs/sha256/HEX      bitstream files, named by the sha256 of their content
//	DIR/manifests/sha256/HEX  the manifests that name them, named by their own digest
//	DIR/tmp/                  downloads in progress (emptied when opened)
//	DIR/.lock                 held by the one process using DIR
//
// Its size is the sum of the blobs' sizes, kept at most max by evicting the
// least recently used blobs that no holder holds, before a download starts;
// blobs a region carries (loaded there and not replaced since) go last, so
// that the next claim for what a region carries can program from the cache
// again after a reboot. Holds and carries live in memory: after a restart
// the caller holds again what its prepared claims use.
type cache struct {
	dir    string
	max    int64
	lock   *os.File
	logger klog.Logger

	mu       sync.Mutex
	blobs    map[digest.Digest]*blobEntry
	used     int64
	reserved int64
	// holders holds, per holder, the layers it holds; held counts the
	// holders of each layer.
	holders map[string]map[digest.Digest]bool
	held    map[digest.Digest]int
	// carried maps each region to the layer it carries; carriers counts
	// the regions carrying each layer.
	carried  map[string]digest.Digest
	carriers map[digest.Digest]int
	// manifests maps each cached manifest to its layer.
	manifests map[digest.Digest]digest.Digest
	evictions int64
}

type blobEntry struct {
	size     int64
	lastUsed time.Time
}

// openCache opens (creating it if needed) the cache in dir, keeping at most
// max bytes of blobs. It waits, as long as ctx allows, while another process
// holds the directory.
func openCache(ctx context.Context, dir string, max int64) (*cache, error) {
	if dir == "" {
		return nil, fmt.Errorf("bitstream cache directory is empty: set --%s, such as %s", FlagCacheDir, DefaultCacheDir)
	}
	if max <= 0 {
		return nil, fmt.Errorf("bitstream cache size %d is not positive: set --%s, such as 4Gi", max, FlagCacheSize)
	}
	c := &cache{
		dir:       dir,
		max:       max,
		logger:    klog.FromContext(ctx).WithValues("cache", dir),
		blobs:     map[digest.Digest]*blobEntry{},
		holders:   map[string]map[digest.Digest]bool{},
		carried:   map[string]digest.Digest{},
		carriers:  map[digest.Digest]int{},
		held:      map[digest.Digest]int{},
		manifests: map[digest.Digest]digest.Digest{},
	}
	for _, d := range []string{c.blobDir(), c.manifestDir(), c.tmpDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("bitstream cache (--%s): %w", FlagCacheDir, err)
		}
	}
	var err error
	if c.lock, err = lockDir(ctx, c.logger, filepath.Join(dir, ".lock")); err != nil {
		return nil, err
	}
	if err := c.load(); err != nil {
		c.lock.Close()
		return nil, err
	}
	return c, nil
}

func (c *cache) blobDir() string     { return filepath.Join(c.dir, "blobs", "sha256") }
func (c *cache) manifestDir() string { return filepath.Join(c.dir, "manifests", "sha256") }
func (c *cache) tmpDir() string      { return filepath.Join(c.dir, "tmp") }

func (c *cache) blobPath(d digest.Digest) string {
	return filepath.Join(c.blobDir(), d.Encoded())
}

func (c *cache) manifestPath(d digest.Digest) string {
	return filepath.Join(c.manifestDir(), d.Encoded())
}

// lockDir takes the cache directory's lock, waiting while another process
// holds it until ctx ends.
func lockDir(ctx context.Context, logger klog.Logger, path string) (*os.File, error) {
	f, err := flock.Acquire(ctx, path, func() {
		logger.Info("Waiting for another process to release the bitstream cache", "lock", path)
	})
	if errors.Is(err, flock.ErrHeld) {
		return nil, fmt.Errorf("bitstream cache %s is in use by another process (it holds %s): stop it, or give each process its own --%s: %w",
			filepath.Dir(path), path, FlagCacheDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("bitstream cache: %w", err)
	}
	return f, nil
}

// load indexes the blobs and manifests on disk and empties tmp. Files that
// are not named by a digest are removed; contents are verified on use.
func (c *cache) load() error {
	tmp, err := os.ReadDir(c.tmpDir())
	if err != nil {
		return fmt.Errorf("bitstream cache: %w", err)
	}
	for _, e := range tmp {
		_ = os.RemoveAll(filepath.Join(c.tmpDir(), e.Name()))
	}
	blobs, err := os.ReadDir(c.blobDir())
	if err != nil {
		return fmt.Errorf("bitstream cache: %w", err)
	}
	for _, e := range blobs {
		d := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		fi, err := e.Info()
		if err != nil || d.Validate() != nil || !fi.Mode().IsRegular() {
			c.logger.Info("Removing a stray file from the bitstream cache", "file", e.Name())
			_ = os.RemoveAll(filepath.Join(c.blobDir(), e.Name()))
			continue
		}
		c.blobs[d] = &blobEntry{size: fi.Size(), lastUsed: fi.ModTime()}
		c.used += fi.Size()
	}
	manifests, err := os.ReadDir(c.manifestDir())
	if err != nil {
		return fmt.Errorf("bitstream cache: %w", err)
	}
	for _, e := range manifests {
		d := digest.NewDigestFromEncoded(digest.SHA256, e.Name())
		raw, ok := c.manifest(d)
		if !ok {
			continue
		}
		var m struct {
			Layers []struct {
				Digest digest.Digest `json:"digest"`
			} `json:"layers"`
		}
		if json.Unmarshal(raw, &m) != nil || len(m.Layers) != 1 {
			_ = os.Remove(c.manifestPath(d))
			continue
		}
		c.manifests[d] = m.Layers[0].Digest
	}
	c.logger.V(2).Info("Opened bitstream cache", "blobs", len(c.blobs), "bytes", c.used, "manifests", len(c.manifests), "limit", c.max)
	return nil
}

// manifest returns the cached manifest d if its content still hashes to
// d; a file that does not is removed.
func (c *cache) manifest(d digest.Digest) ([]byte, bool) {
	if d.Validate() != nil {
		return nil, false
	}
	raw, err := readManifest(c.manifestPath(d))
	if err == nil && digest.FromBytes(raw) == d {
		return raw, true
	}
	if !errors.Is(err, fs.ErrNotExist) {
		c.logger.Info("Removing a corrupt manifest from the bitstream cache", "digest", d)
		_ = os.Remove(c.manifestPath(d))
	}
	c.mu.Lock()
	delete(c.manifests, d)
	c.mu.Unlock()
	return nil, false
}

// readManifest reads at most one byte more than a manifest may have.
func readManifest(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
}

// putManifest stores the manifest a, durably, unless it is stored.
func (c *cache) putManifest(a *artifact) error {
	c.mu.Lock()
	_, stored := c.manifests[a.Digest]
	c.mu.Unlock()
	if stored {
		return nil
	}
	if err := atomicfile.Write(c.manifestPath(a.Digest), a.raw, atomicfile.Options{Perm: 0o444}); err != nil {
		return fmt.Errorf("bitstream cache: %w", err)
	}
	c.mu.Lock()
	c.manifests[a.Digest] = a.Layer.Digest
	c.mu.Unlock()
	return nil
}

// lookup returns the path of blob d if the cache has it.
func (c *cache) lookup(d digest.Digest) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.blobs[d]
	return c.blobPath(d), ok
}

// verify hashes blob d and fails unless it has size bytes and hashes to d.
func (c *cache) verify(d digest.Digest, size int64) error {
	f, err := os.Open(c.blobPath(d))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, make([]byte, copyBuffer))
	if err != nil {
		return err
	}
	if got := digest.NewDigest(digest.SHA256, h); n != size || got != d {
		return fmt.Errorf("%w: cached %s has %d bytes hashing to %s, want %d bytes", ErrDigestMismatch, c.blobPath(d), n, got, size)
	}
	return nil
}

// touch records a use of blob d, also on disk (its mtime) so that the order
// of eviction survives a restart.
func (c *cache) touch(d digest.Digest) {
	now := time.Now()
	c.mu.Lock()
	if e := c.blobs[d]; e != nil {
		e.lastUsed = now
	}
	c.mu.Unlock()
	_ = os.Chtimes(c.blobPath(d), now, now)
}

// drop removes blob d (found corrupt), whoever holds it.
func (c *cache) drop(d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(d)
}

// removeLocked removes blob d and the manifests naming it.
func (c *cache) removeLocked(d digest.Digest) {
	if e := c.blobs[d]; e != nil {
		c.used -= e.size
		delete(c.blobs, d)
	}
	_ = os.Remove(c.blobPath(d))
	for m, l := range c.manifests {
		if l == d {
			delete(c.manifests, m)
			_ = os.Remove(c.manifestPath(m))
		}
	}
}

// reserve makes room for a blob of size bytes, evicting the least
// recently used blobs no holder holds, and reserves it until commit or
// unreserve.
func (c *cache) reserve(d digest.Digest, size int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.max {
		return fmt.Errorf("%w: bitstream layer %s is %d bytes, more than the whole cache (%d): raise --%s",
			ErrCacheFull, d, size, c.max, FlagCacheSize)
	}
	if !c.evictLocked(c.max-size, d) {
		var heldBytes int64
		for l, n := range c.held {
			if e := c.blobs[l]; e != nil && n > 0 {
				heldBytes += e.size
			}
		}
		return fmt.Errorf("%w: bitstream layer %s needs %d bytes, but %d of the cache's %d are held by prepared claims (%d more by downloads in progress): raise --%s, or wait for claims to end",
			ErrCacheFull, d, size, heldBytes, c.max, c.reserved, FlagCacheSize)
	}
	c.reserved += size
	return nil
}

// unreserve gives back a reservation whose download failed.
func (c *cache) unreserve(size int64) {
	c.mu.Lock()
	c.reserved -= size
	c.mu.Unlock()
}

// commit moves the verified download tmp into place as blob d and turns
// its reservation into an entry. Like the download, the rename is not made
// durable: a blob lost to a crash is pulled again.
func (c *cache) commit(d digest.Digest, size int64, tmp string) error {
	if err := os.Rename(tmp, c.blobPath(d)); err != nil {
		c.unreserve(size)
		return fmt.Errorf("bitstream cache: %w", err)
	}
	c.mu.Lock()
	c.reserved -= size
	if e := c.blobs[d]; e != nil {
		c.used -= e.size
	}
	c.blobs[d] = &blobEntry{size: size, lastUsed: time.Now()}
	c.used += size
	c.mu.Unlock()
	return nil
}

// evictLocked evicts unheld blobs other than keep, those no region carries
// first, each kind least recently used first, until used+reserved is at
// most limit. It reports whether that was reached.
func (c *cache) evictLocked(limit int64, keep digest.Digest) bool {
	if c.used+c.reserved <= limit {
		return true
	}
	var victims []digest.Digest
	for d := range c.blobs {
		if d != keep && c.held[d] == 0 {
			victims = append(victims, d)
		}
	}
	slices.SortFunc(victims, func(a, b digest.Digest) int {
		if ca, cb := c.carriers[a] > 0, c.carriers[b] > 0; ca != cb {
			if ca {
				return 1
			}
			return -1
		}
		return c.blobs[a].lastUsed.Compare(c.blobs[b].lastUsed)
	})
	for _, d := range victims {
		if c.used+c.reserved <= limit {
			break
		}
		c.logger.V(2).Info("Evicting bitstream from the cache", "layer", d, "bytes", c.blobs[d].size)
		c.removeLocked(d)
		c.evictions++
	}
	return c.used+c.reserved <= limit
}

// hold records that holder uses blob d (present or not) and reports
// whether that is new.
func (c *cache) hold(holder string, d digest.Digest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.holders[holder]
	if h == nil {
		h = map[digest.Digest]bool{}
		c.holders[holder] = h
	}
	if h[d] {
		return false
	}
	h[d] = true
	c.held[d]++
	return true
}

// unhold drops holder's hold on d alone.
func (c *cache) unhold(holder string, d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unholdLocked(holder, d)
}

func (c *cache) unholdLocked(holder string, d digest.Digest) {
	h := c.holders[holder]
	if !h[d] {
		return
	}
	delete(h, d)
	if len(h) == 0 {
		delete(c.holders, holder)
	}
	if c.held[d]--; c.held[d] <= 0 {
		delete(c.held, d)
	}
}

// release drops every hold of holder, then evicts down to the limit if the
// cache is over it (after the limit was lowered, or while held blobs kept it
// over).
func (c *cache) release(holder string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d := range c.holders[holder] {
		c.unholdLocked(holder, d)
	}
	c.evictLocked(c.max, "")
}

// carry records that region carries blob d ("": nothing known), in place
// of what it carried before.
func (c *cache) carry(region string, d digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.carried[region]; ok {
		if c.carriers[old]--; c.carriers[old] <= 0 {
			delete(c.carriers, old)
		}
		delete(c.carried, region)
	}
	if d != "" {
		c.carried[region] = d
		c.carriers[d]++
	}
}

// close releases the directory's lock.
func (c *cache) close() error {
	return c.lock.Close()
}
