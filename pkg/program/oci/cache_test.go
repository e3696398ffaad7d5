package oci

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/flock"
)

// threeLayers pushes three bitstreams of one size to a registry and opens
// a puller whose cache has room for two and a half of them; cached says
// whether one is in the cache.
func threeLayers(t *testing.T) (r *registrytest.Registry, p *Puller, refs []*Pushed, cached func(*Pushed) bool) {
	t.Helper()
	r = registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	for _, afu := range []string{testAFU, testAFU2, "00112233445566778899aabbccddeeff"} {
		refs = append(refs, push(t, c, r, writeGBS(t, testIf, afu, 4000), "accel/f"+afu[:4]+":v1"))
	}
	size := refs[0].Size
	p = newPuller(t, r, "", func(o *PullerOptions) { o.CacheSize = 2*size + size/2 })
	cached = func(ref *Pushed) bool {
		_, ok := p.cache.lookup(digest.Digest(ref.LayerDigest))
		return ok
	}
	return r, p, refs, cached
}

func TestCacheEvictsOnlyUnheld(t *testing.T) {
	r, p, refs, cached := threeLayers(t)
	ctx := t.Context()
	size := refs[0].Size

	if _, err := p.Fetch(ctx, refs[0].Reference, FetchOptions{Holder: "claim-a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fetch(ctx, refs[1].Reference, FetchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fetch(ctx, refs[2].Reference, FetchOptions{Holder: "claim-c"}); err != nil {
		t.Fatal(err)
	}
	if !cached(refs[0]) || cached(refs[1]) || !cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the unheld second bitstream evicted, the held ones kept", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}
	if s := p.Stats(); s.Evictions != 1 {
		t.Errorf("Stats().Evictions = %d, want 1", s.Evictions)
	}

	// Everything held: no room, and nothing held is evicted.
	_, err := p.Fetch(ctx, refs[1].Reference, FetchOptions{Holder: "claim-b"})
	wantError(t, err, []error{ErrCacheFull}, "held by prepared claims", "--"+FlagCacheSize)
	if !cached(refs[0]) || !cached(refs[2]) {
		t.Fatal("a held bitstream was evicted")
	}

	// Once claim-a ends its bitstream may go.
	p.Release("claim-a")
	if _, err := p.Fetch(ctx, refs[1].Reference, FetchOptions{Holder: "claim-b"}); err != nil {
		t.Fatalf("Fetch after Release error = %v", err)
	}
	if cached(refs[0]) || !cached(refs[1]) || !cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the released first bitstream evicted", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}

	// Holds restored after a restart protect a bitstream not fetched since.
	if err := p.Hold("claim-b2", refs[1].LayerDigest); err != nil {
		t.Fatal(err)
	}
	p.Release("claim-b")
	p.Release("claim-c")
	if _, err := p.Fetch(ctx, refs[0].Reference, FetchOptions{}); err != nil {
		t.Fatal(err)
	}
	if !cached(refs[1]) || cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the bitstream held by Hold kept and the released one evicted", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}
	if err := p.Hold("claim", "sha256:abc"); err == nil {
		t.Error("Hold(malformed digest) = nil, want an error")
	}
	_, err = newPuller(t, r, "", func(o *PullerOptions) { o.CacheSize = size / 2 }).Fetch(ctx, refs[0].Reference, FetchOptions{})
	wantError(t, err, []error{ErrCacheFull}, "more than the whole cache")
}

// TestCacheEvictsCarriedLast: a layer a region carries is evicted only
// when no other unheld layer is left, least recently used or not; once
// the region carries something else it goes first again. Carrying never
// makes a pull fail for room.
func TestCacheEvictsCarriedLast(t *testing.T) {
	_, p, refs, cached := threeLayers(t)
	ctx := t.Context()
	fetch := func(ref *Pushed) {
		t.Helper()
		if _, err := p.Fetch(ctx, ref.Reference, FetchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fetch(refs[0]) // the least recently used, but carried
	if err := p.Carry("fpga-0000-01-00-0-p0", refs[0].LayerDigest); err != nil {
		t.Fatal(err)
	}
	fetch(refs[1])
	fetch(refs[2])
	if !cached(refs[0]) || cached(refs[1]) || !cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the uncarried second layer evicted before the carried first", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}
	// Only carried and newest left: the carried one makes room.
	if err := p.Carry("fpga-0000-02-00-0-p0", refs[2].LayerDigest); err != nil {
		t.Fatal(err)
	}
	fetch(refs[1])
	if cached(refs[0]) || !cached(refs[1]) || !cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the least recently used carried layer evicted for room", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}
	// The second region now carries nothing known: its layer goes first.
	if err := p.Carry("fpga-0000-02-00-0-p0", ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Carry("fpga-0000-01-00-0-p0", refs[1].LayerDigest); err != nil {
		t.Fatal(err)
	}
	fetch(refs[0])
	if !cached(refs[0]) || !cached(refs[1]) || cached(refs[2]) {
		t.Fatalf("cached = %v %v %v, want the layer no region carries any more evicted", cached(refs[0]), cached(refs[1]), cached(refs[2]))
	}
	if err := p.Carry("fpga-0000-01-00-0-p0", "sha256:abc"); err == nil {
		t.Error("Carry(malformed digest) = nil, want an error")
	}
}

func TestCacheDirectoryLocked(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	dir := t.TempDir()
	newPuller(t, r, dir, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*flock.Retry)
	defer cancel()
	_, err := NewPuller(ctx, PullerOptions{Registry: registryOptions(r), CacheDir: dir})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("NewPuller on a cache another Puller holds = %v, want it to give up when ctx ends", err)
	}
	wantError(t, err, nil, "in use by another process", "--"+FlagCacheDir)
}

func TestCacheLoadRemovesStrays(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	dir := t.TempDir()
	p := newPuller(t, r, dir, nil)
	c := p.cache
	for _, f := range []string{c.tmpDir() + "/layer-123", c.blobDir() + "/not-a-digest"} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	newPuller(t, r, dir, nil)
	for _, f := range []string{c.tmpDir() + "/layer-123", c.blobDir() + "/not-a-digest"} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s survived opening the cache (stat error %v), want it removed", f, err)
		}
	}
}
