package oci

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// wantError fails unless err matches every sentinel and contains every
// substring.
func wantError(t *testing.T, err error, sentinels []error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want one matching %v containing %q", sentinels, substrings)
	}
	for _, s := range sentinels {
		if !errors.Is(err, s) {
			t.Errorf("error %q does not match %v", err, s)
		}
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error = %q\nwant it to contain %q", err, s)
		}
	}
}

func TestPushFetch(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	file := writeGBS(t, testIf, testAFU, 4096)
	pushed := push(t, c, r, file, "accel/nlb0:v1")
	if !strings.HasPrefix(pushed.Reference, r.Host+"/accel/nlb0:v1@sha256:") || pushed.Reference != r.Host+"/accel/nlb0:v1@"+pushed.ManifestDigest {
		t.Fatalf("Push().Reference = %q, want %s/accel/nlb0:v1@<manifest digest>", pushed.Reference, r.Host)
	}
	again := push(t, c, r, file, "accel/nlb0:v1")
	if again.ManifestDigest != pushed.ManifestDigest {
		t.Errorf("pushing the same file again gave digest %s, then %s: the manifest must be deterministic", pushed.ManifestDigest, again.ManifestDigest)
	}

	p := newPuller(t, r, "", nil)
	ctx := t.Context()
	f, err := p.Fetch(ctx, pushed.Reference, FetchOptions{Holder: "claim-a", AFUID: testAFU, InterfaceIDs: []string{testIf}})
	if err != nil {
		t.Fatalf("Fetch() error = %v", err)
	}
	if f.FromCache || f.ManifestDigest != pushed.ManifestDigest || f.LayerDigest != pushed.LayerDigest || f.Reference != pushed.Reference {
		t.Errorf("Fetch() = %+v, want a pull of %+v", f, pushed)
	}
	bs := f.Bitstream
	if bs.Format != program.FormatGBS || bs.InterfaceID != testIf || bs.AFUID != testAFU || "sha256:"+bs.SHA256 != pushed.LayerDigest {
		t.Errorf("Fetch().Bitstream = %+v, want the pushed GBS", bs)
	}
	want, _ := os.ReadFile(file)
	if got, err := os.ReadFile(bs.Path); err != nil || string(got) != string(want) {
		t.Fatalf("cached file %s differs from the pushed one (err %v)", bs.Path, err)
	}
	if _, err := bs.ReadPayload(bs.SHA256); err != nil {
		t.Errorf("ReadPayload(layer digest) error = %v: Load could not program the fetched file", err)
	}

	f2, err := p.Fetch(ctx, pushed.Reference, FetchOptions{Holder: "claim-b"})
	if err != nil || !f2.FromCache || f2.Bitstream.Path != bs.Path {
		t.Fatalf("second Fetch() = %+v, %v; want it from the cache", f2, err)
	}
	if s := p.Stats(); s.Pulls != 1 || s.CacheHits != 1 {
		t.Errorf("Stats() = %+v, want 1 pull and 1 cache hit", s)
	}
}

func TestPushAOCXAndInspect(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	var aocx strings.Builder
	if err := program.WriteAOCX(&aocx, gbsBytes(t, testIf2, testAFU2, 1024)); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "kernel.aocx", []byte(aocx.String()))
	pushed := push(t, c, r, file, "opencl/kernel:2024.1")
	if pushed.Annotations != (Annotations{Format: program.FormatAOCX, Vendor: VendorIntel, InterfaceID: testIf2, AFUID: testAFU2}) {
		t.Errorf("Push().Annotations = %+v", pushed.Annotations)
	}
	for _, ref := range []string{r.Host + "/opencl/kernel:2024.1", pushed.Reference} {
		in, err := c.Inspect(t.Context(), ref, 0)
		if err != nil {
			t.Fatalf("Inspect(%s) error = %v", ref, err)
		}
		if in.Reference != pushed.Reference || in.LayerDigest != pushed.LayerDigest || in.Annotations != pushed.Annotations ||
			in.Bitstream.Format != program.FormatAOCX || in.Bitstream.AFUID != testAFU2 || in.Bitstream.Path != "" {
			t.Errorf("Inspect(%s) = %+v, want what was pushed (%+v)", ref, in, pushed)
		}
	}
	p := newPuller(t, r, "", nil)
	f, err := p.Fetch(t.Context(), pushed.Reference, FetchOptions{})
	if err != nil || f.Bitstream.Format != program.FormatAOCX || f.Bitstream.AFUID != testAFU2 {
		t.Fatalf("Fetch(aocx) = %+v, %v", f, err)
	}
}

func TestPushRefuses(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	ctx := t.Context()
	bad := writeFile(t, "bad.gbs", []byte("XeonFPGA\xb7GBSv001 truncated"))
	_, err := c.Push(ctx, bad, r.Host+"/accel/bad:v1")
	wantError(t, err, []error{program.ErrInvalidBitstream}, "bad.gbs")

	good := writeGBS(t, testIf, testAFU, 64)
	_, err = c.Push(ctx, good, r.Host+"/accel/nlb0@"+zeroDigest.String())
	wantError(t, err, []error{ErrReference}, "has a digest", "drop")
	_, err = c.Push(ctx, good, "accel/nlb0:v1")
	wantError(t, err, []error{ErrReference}, "registry.example.com/accel/nlb0:v1")
}

func TestFetchRefuses(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	pushed := push(t, c, r, writeGBS(t, testIf, testAFU, 256), "accel/nlb0:v1")
	gbs := gbsBytes(t, testIf, testAFU, 128)
	tests := []struct {
		name      string
		ref       func() string
		opts      FetchOptions
		edit      func(o *PullerOptions)
		sentinels []error
		substr    []string
	}{
		{name: "tag without digest", ref: func() string { return r.Host + "/accel/nlb0:v1" },
			sentinels: []error{ErrReference}, substr: []string{"has no digest", r.Host + "/accel/nlb0:v1@sha256:"}},
		{name: "wrong digest", ref: func() string { return r.Host + "/accel/nlb0:v1@" + zeroDigest.String() },
			sentinels: []error{ErrNotFound, program.ErrNotFound}, substr: []string{"has no manifest " + zeroDigest.String()}},
		{name: "missing repository", ref: func() string { return r.Host + "/accel/none@" + pushed.ManifestDigest },
			sentinels: []error{ErrNotFound}},
		{name: "container image", ref: func() string {
			return pushCrafted(t, c, r, "accel/image", gbs, func(m *ocispec.Manifest) {
				m.ArtifactType, m.Annotations = "", nil
				m.Layers[0].MediaType = ocispec.MediaTypeImageLayerGzip
			})
		}, sentinels: []error{ErrNotBitstreamArtifact, program.ErrInvalidBitstream}, substr: []string{`artifactType ""`, ArtifactType}},
		{name: "wrong layer media type", ref: func() string {
			return pushCrafted(t, c, r, "accel/mt", gbs, func(m *ocispec.Manifest) { m.Layers[0].MediaType = "application/octet-stream" })
		}, sentinels: []error{ErrNotBitstreamArtifact}, substr: []string{`"application/octet-stream"`, LayerMediaType}},
		{name: "two layers", ref: func() string {
			return pushCrafted(t, c, r, "accel/two", gbs, func(m *ocispec.Manifest) { m.Layers = append(m.Layers, m.Layers[0]) })
		}, sentinels: []error{ErrNotBitstreamArtifact}, substr: []string{"has 2 layers"}},
		{name: "annotations disagree with the header", ref: func() string {
			return pushCrafted(t, c, r, "accel/liar", gbs, func(m *ocispec.Manifest) { m.Annotations[AnnotationAFUID] = testAFU2 })
		}, opts: FetchOptions{AFUID: testAFU2}, sentinels: []error{ErrAnnotationMismatch, program.ErrInvalidBitstream},
			substr: []string{"declares gbs interface " + testIf + " AFU " + testAFU2, "AFU " + testAFU}},
		{name: "layer not a bitstream", ref: func() string {
			return pushCrafted(t, c, r, "accel/junk", []byte("not a bitstream at all"), nil)
		}, sentinels: []error{program.ErrInvalidBitstream}, substr: []string{"not a usable bitstream"}},
		{name: "layer over the cap", ref: func() string { return pushed.Reference },
			edit: func(o *PullerOptions) { o.MaxLayerSize = 100 }, sentinels: []error{ErrTooLarge, program.ErrInvalidBitstream},
			substr: []string{"more than the 100-byte cap", "--" + FlagMaxLayerSize}},
		{name: "interface of another region", ref: func() string { return pushed.Reference },
			opts: FetchOptions{InterfaceIDs: []string{testIf2}}, sentinels: []error{program.ErrInterfaceMismatch},
			substr: []string{"built for interface " + testIf, "region has interface " + testIf2}},
		{name: "another AFU", ref: func() string { return pushed.Reference },
			opts: FetchOptions{AFUID: testAFU2}, sentinels: []error{program.ErrInvalidBitstream}, substr: []string{"not the requested afuID " + testAFU2}},
		{name: "registry not allowed", ref: func() string { return pushed.Reference },
			edit: func(o *PullerOptions) { o.Registry.Allowed = []string{"registry.example.com:5000", "ghcr.io"} }, sentinels: []error{ErrNotAllowed, program.ErrNotFound},
			substr: []string{"is in registry " + r.Host, "only from ghcr.io, registry.example.com:5000", "--" + FlagAllowedRegistries}},
		{name: "sha256 pin of another file", ref: func() string { return pushed.Reference },
			opts: FetchOptions{SHA256: zeroDigest.Encoded()}, sentinels: []error{program.ErrChecksumMismatch}, substr: []string{"sha256 pins " + zeroDigest.Encoded()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newPuller(t, r, "", tc.edit)
			tc.opts.Holder = "claim"
			_, err := p.Fetch(t.Context(), tc.ref(), tc.opts)
			wantError(t, err, tc.sentinels, tc.substr...)
			if s := p.Stats(); s.Pulls != 0 {
				t.Errorf("Stats().Pulls = %d after a refused fetch, want 0: nothing refused may enter the cache", s.Pulls)
			}
			if hs := holdersOf(p, pushed.LayerDigest); len(hs) != 0 {
				t.Errorf("holders after a failed fetch = %v, want none", hs)
			}
		})
	}
	// A sha256 pin that matches the file is fine.
	p := newPuller(t, r, "", nil)
	if _, err := p.Fetch(t.Context(), pushed.Reference, FetchOptions{SHA256: "sha256:" + strings.TrimPrefix(pushed.LayerDigest, "sha256:")}); err != nil {
		t.Errorf("Fetch(matching sha256 pin) error = %v", err)
	}
	// A region that accepts several interfaces (an Alveo shell) takes a
	// build for any of them.
	if _, err := p.Fetch(t.Context(), pushed.Reference, FetchOptions{InterfaceIDs: []string{testIf2, testIf}}); err != nil {
		t.Errorf("Fetch(for a region of interfaces %s and %s) error = %v", testIf2, testIf, err)
	}
}

// TestFetchOnlyFromAllowedRegistries: a registry on --allowed-registries
// is pulled from; once it is no longer on the list, its bitstreams are
// refused, the copies in the node's cache too.
func TestFetchOnlyFromAllowedRegistries(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	pushed := push(t, c, r, writeGBS(t, testIf, testAFU, 256), "accel/nlb0:v1")
	dir := t.TempDir()
	p := newPuller(t, r, dir, func(o *PullerOptions) { o.Registry.Allowed = []string{r.Host} })
	if _, err := p.Fetch(t.Context(), pushed.Reference, FetchOptions{}); err != nil {
		t.Fatalf("Fetch from an allowed registry: %v", err)
	}
	p.Close()
	p = newPuller(t, r, dir, func(o *PullerOptions) { o.Registry.Allowed = []string{"registry.example.com"} })
	_, err := p.Fetch(t.Context(), pushed.Reference, FetchOptions{})
	wantError(t, err, []error{ErrNotAllowed}, "only from registry.example.com")
	if _, err := NewClient(RegistryOptions{Allowed: []string{"registry.example.com/accel"}}); err == nil || !strings.Contains(err.Error(), "--"+FlagAllowedRegistries) {
		t.Errorf("NewClient with a repository among the allowed registries: %v, want an error naming --%s", err, FlagAllowedRegistries)
	}
}

func TestFetchRegistryDown(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	cached := push(t, c, r, writeGBS(t, testIf, testAFU, 512), "accel/nlb0:v1")
	uncached := push(t, c, r, writeGBS(t, testIf, testAFU2, 512), "accel/nlb3:v1")
	dir := t.TempDir()
	p := newPuller(t, r, dir, nil)
	ctx := t.Context()
	if _, err := p.Fetch(ctx, cached.Reference, FetchOptions{Holder: "claim-a"}); err != nil {
		t.Fatal(err)
	}
	r.Stop()

	f, err := p.Fetch(ctx, cached.Reference, FetchOptions{Holder: "claim-b"})
	if err != nil || !f.FromCache {
		t.Fatalf("Fetch(cached) with the registry down = %+v, %v; want the cached copy", f, err)
	}
	_, err = p.Fetch(ctx, uncached.Reference, FetchOptions{Holder: "claim-c"})
	wantError(t, err, []error{ErrUnreachable}, "registry "+r.Host+" did not answer", "after retries")

	// The cache survives a restart of the node daemon.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p2 := newPuller(t, r, dir, nil)
	f, err = p2.Fetch(ctx, cached.Reference, FetchOptions{})
	if err != nil || !f.FromCache || f.Bitstream.AFUID != testAFU {
		t.Fatalf("Fetch after a restart with the registry down = %+v, %v; want the cached copy", f, err)
	}
}

func TestCachedFileVerifiedOnUse(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	pushed := push(t, c, r, writeGBS(t, testIf, testAFU, 512), "accel/nlb0:v1")
	p := newPuller(t, r, "", nil)
	ctx := t.Context()
	f, err := p.Fetch(ctx, pushed.Reference, FetchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	corrupt := func() {
		t.Helper()
		if err := os.Chmod(f.Bitstream.Path, 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(f.Bitstream.Path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := []byte{0}
		if _, err := fh.ReadAt(last, f.Bitstream.Size-1); err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt([]byte{^last[0]}, f.Bitstream.Size-1); err != nil {
			t.Fatal(err)
		}
		fh.Close()
	}
	corrupt()
	f2, err := p.Fetch(ctx, pushed.Reference, FetchOptions{})
	if err != nil || f2.FromCache {
		t.Fatalf("Fetch of a corrupted cached file = %+v, %v; want it pulled again", f2, err)
	}
	if s := p.Stats(); s.CorruptBlobs != 1 || s.Pulls != 2 {
		t.Errorf("Stats() = %+v, want 1 corrupt blob and 2 pulls", s)
	}

	// The copy pulled again serves without the registry; a corrupt copy
	// then cannot.
	r.Stop()
	if f3, err := p.Fetch(ctx, pushed.Reference, FetchOptions{}); err != nil || !f3.FromCache {
		t.Fatalf("Fetch with the registry down after a re-pull = %+v, %v; want the cached copy", f3, err)
	}
	corrupt()
	_, err = p.Fetch(ctx, pushed.Reference, FetchOptions{})
	wantError(t, err, []error{ErrUnreachable})
}

func TestFetchConcurrentSameDigestPullsOnce(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	pushed := push(t, c, r, writeGBS(t, testIf, testAFU, 1<<20), "accel/nlb0:v1")
	p := newPuller(t, r, "", nil)
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = p.Fetch(ctx, pushed.Reference, FetchOptions{Holder: "claim-" + string(rune('a'+i))})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Fetch %d error = %v", i, err)
		}
	}
	if s := p.Stats(); s.Pulls != 1 {
		t.Errorf("Stats().Pulls = %d for 8 fetches of one digest, want 1", s.Pulls)
	}
	if hs := holdersOf(p, pushed.LayerDigest); len(hs) != 8 {
		t.Errorf("holders = %v, want the 8 claims", hs)
	}
}

// lyingManifest starts a registry holding one GBS (AFU testAFU) under two
// manifests: honest, whose annotations say what the file is, and liar,
// whose annotations name testAFU2. It returns them with a puller of it.
func lyingManifest(t *testing.T) (r *registrytest.Registry, p *Puller, honest, liar string) {
	t.Helper()
	r = registrytest.Start(t, registrytest.Config{})
	c := newClient(t, registryOptions(r))
	gbs := gbsBytes(t, testIf, testAFU, 512)
	honest = pushCrafted(t, c, r, "accel/nlb0", gbs, nil)
	liar = pushCrafted(t, c, r, "accel/liar", gbs, func(m *ocispec.Manifest) { m.Annotations[AnnotationAFUID] = testAFU2 })
	return r, newPuller(t, r, "", nil), honest, liar
}

// TestFetchLyingManifestKeepsCachedBlob: a manifest whose annotations
// disagree with the header of a layer the cache already holds (another
// publisher's manifest naming the same layer) is refused, and refusing it
// leaves the cached file, which its digest proves intact, to the claims
// that hold it: a lie in one manifest is no corruption of the blob.
func TestFetchLyingManifestKeepsCachedBlob(t *testing.T) {
	r, p, honest, liar := lyingManifest(t)
	ctx := t.Context()
	f, err := p.Fetch(ctx, honest, FetchOptions{Holder: "claim-a", AFUID: testAFU})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Fetch(ctx, liar, FetchOptions{Holder: "claim-b", AFUID: testAFU2})
	wantError(t, err, []error{ErrAnnotationMismatch, program.ErrInvalidBitstream})
	if _, err := f.Bitstream.ReadPayload(f.Bitstream.SHA256); err != nil {
		t.Errorf("claim-a's cached bitstream after a lying manifest's fetch: ReadPayload error = %v, want it still there", err)
	}
	if s := p.Stats(); s.CorruptBlobs != 0 || s.Pulls != 1 {
		t.Errorf("Stats() = %+v, want no corrupt blob and 1 pull: the blob was intact", s)
	}
	r.Stop()
	if f2, err := p.Fetch(ctx, honest, FetchOptions{Holder: "claim-c", AFUID: testAFU}); err != nil || !f2.FromCache {
		t.Errorf("Fetch(honest) with the registry down after the lying manifest = %+v, %v; want the cached copy", f2, err)
	}
}

// gatedBlobs holds every blob download until open is closed, and tells
// started of the first.
type gatedBlobs struct {
	next    http.RoundTripper
	started chan struct{}
	once    sync.Once
	open    chan struct{}
}

func (g *gatedBlobs) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, "/blobs/") {
		g.once.Do(func() { close(g.started) })
		<-g.open
	}
	return g.next.RoundTrip(req)
}

// TestSharedPullNotJudgedByStartersManifest: the pull of a layer is shared
// by every Fetch naming its digest at the time, whatever manifest each
// came through, and each Fetch checks its own manifest's annotations. A
// lying manifest whose Fetch started the pull must not fail the honest
// manifest's Fetch that joined it.
func TestSharedPullNotJudgedByStartersManifest(t *testing.T) {
	_, p, honest, liar := lyingManifest(t)
	gate := &gatedBlobs{next: p.client.auth.Client.Transport, started: make(chan struct{}), open: make(chan struct{})}
	p.client.auth.Client.Transport = gate
	layerWaits := make(chan struct{}, 2)
	p.onWait = func(key string) {
		if strings.HasPrefix(key, "layer ") {
			layerWaits <- struct{}{}
		}
	}
	ctx := t.Context()
	liarErr := make(chan error, 1)
	go func() {
		_, err := p.Fetch(ctx, liar, FetchOptions{Holder: "claim-b", AFUID: testAFU2})
		liarErr <- err
	}()
	<-gate.started // the lying manifest's Fetch pulls the layer
	<-layerWaits
	type fetched struct {
		f   *Fetched
		err error
	}
	honestDone := make(chan fetched, 1)
	go func() {
		f, err := p.Fetch(ctx, honest, FetchOptions{Holder: "claim-a", AFUID: testAFU})
		honestDone <- fetched{f, err}
	}()
	<-layerWaits // the honest Fetch joined the pull
	close(gate.open)
	wantError(t, <-liarErr, []error{ErrAnnotationMismatch, program.ErrInvalidBitstream})
	got := <-honestDone
	if got.err != nil {
		t.Fatalf("Fetch(honest) that joined a lying manifest's pull: %v; want the bitstream", got.err)
	}
	if got.f.Bitstream.AFUID != testAFU {
		t.Errorf("Fetch(honest) AFU %s, want %s", got.f.Bitstream.AFUID, testAFU)
	}
}
