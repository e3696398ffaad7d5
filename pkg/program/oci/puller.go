package oci

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sync/singleflight"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Defaults of PullerOptions.
const (
	// DefaultCacheDir sits beside program.DefaultRepositoryDir.
	DefaultCacheDir = "/srv/fpga/oci-cache"
	// DefaultCacheSize is the default limit of the cache.
	DefaultCacheSize int64 = 4 << 30
	// DefaultMaxLayerSize is the default cap of a bitstream layer: the
	// largest file program.Open accepts by default.
	DefaultMaxLayerSize = program.DefaultMaxFileSize
	// DefaultPullTimeout bounds one pull (manifest and layer) from start to
	// end, whoever waits for it.
	DefaultPullTimeout = 10 * time.Minute
)

// copyBuffer is the size of the buffer a download or a hash reads with.
const copyBuffer = 1 << 20

// transientHolderPrefix names the holds a Fetch without a holder takes for
// its own duration.
const transientHolderPrefix = "\x00fetch-"

// PullerOptions configure a Puller. AddFlags registers them as flags.
type PullerOptions struct {
	Registry RegistryOptions
	// CacheDir is the cache's directory (DefaultCacheDir when empty).
	CacheDir string
	// CacheSize is the most bytes of bitstreams the cache keeps
	// (DefaultCacheSize when 0).
	CacheSize int64
	// MaxLayerSize refuses larger layers before pulling them
	// (DefaultMaxLayerSize when 0).
	MaxLayerSize int64
	// PullTimeout bounds one pull (DefaultPullTimeout when 0).
	PullTimeout time.Duration
	// OpenOptions are used to open pulled bitstreams (program.Open); a
	// program.WithMaxFileSize below MaxLayerSize refuses layers between the
	// two after pulling them.
	OpenOptions []program.OpenOption
}

// FetchOptions say what a caller needs from a bitstream. Each set field is
// checked against the manifest's annotations before the layer is pulled.
type FetchOptions struct {
	// Holder (a claim UID) holds the cached file until Release(Holder), so
	// that it is not evicted while the claim may program from it. Without a
	// holder the file may be evicted as soon as Fetch returns.
	Holder string
	// AFUID, when set, must be the bitstream's AFU ID
	// (program.ErrInvalidBitstream otherwise).
	AFUID string
	// InterfaceIDs, when set, must include the bitstream's interface ID
	// (program.ErrInterfaceMismatch otherwise): pass the ones the region
	// accepts (discovery.Card.Interfaces).
	InterfaceIDs []string
	// SHA256, when set (64 hex digits, optionally "sha256:"), must be the
	// digest of the bitstream file, that is of the layer
	// (program.ErrChecksumMismatch otherwise).
	SHA256 string
}

// Fetched is a bitstream pulled and verified, ready for program.Load.
type Fetched struct {
	// Bitstream is the cached file, opened: its header agrees with the
	// annotations and its SHA256 is the layer's digest. Pass
	// LoadOptions{SHA256: Bitstream.SHA256} to program.Load so the file is
	// checked again as it is programmed.
	Bitstream *program.Bitstream
	// Reference is the reference as given; ManifestDigest and LayerDigest
	// ("sha256:...") are what a claim's status shows.
	Reference      string
	ManifestDigest string
	LayerDigest    string
	Annotations    Annotations
	// FromCache is set when nothing was pulled: the manifest and the file
	// were in the cache (and the file was verified again).
	FromCache bool
}

// Stats count what a Puller did since it started.
type Stats struct {
	// Pulls counts layers downloaded; PulledBytes their bytes.
	Pulls, PulledBytes int64
	// CacheHits counts fetches served from the cache.
	CacheHits int64
	// Evictions counts blobs evicted to make room.
	Evictions int64
	// CorruptBlobs counts cached files that failed verification and were
	// removed.
	CorruptBlobs int64
}

// Puller fetches digest-pinned bitstreams from registries into a
// content-addressed cache on the node. Concurrent fetches of one digest
// share one pull. Once the cache has a bitstream's manifest and file, fetching
// it needs no registry: the file is verified again (sha256) instead, so a
// registry that is down does not stop claims whose bitstream was pulled
// before. A Puller is safe for concurrent use.
type Puller struct {
	client      *Client
	cache       *cache
	maxLayer    int64
	pullTimeout time.Duration
	openOpts    []program.OpenOption

	flight    singleflight.Group
	transient atomic.Int64
	// onWait, when set, is called with the key of each shared pull a
	// Fetch waits for (tests).
	onWait func(key string)

	pulls, pulledBytes, hits, corrupt atomic.Int64
}

// NewPuller opens the cache (creating its directory, waiting while another
// process uses it) and returns a Puller. The logger comes from ctx.
func NewPuller(ctx context.Context, o PullerOptions) (*Puller, error) {
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MaxLayerSize <= 0 {
		o.MaxLayerSize = DefaultMaxLayerSize
	}
	if o.PullTimeout <= 0 {
		o.PullTimeout = DefaultPullTimeout
	}
	client, err := NewClient(o.Registry)
	if err != nil {
		return nil, err
	}
	c, err := openCache(ctx, o.CacheDir, o.CacheSize)
	if err != nil {
		return nil, err
	}
	return &Puller{client: client, cache: c, maxLayer: o.MaxLayerSize, pullTimeout: o.PullTimeout, openOpts: o.OpenOptions}, nil
}

// Close releases the cache directory for another process.
func (p *Puller) Close() error { return p.cache.close() }

// Hold records that holder uses the cached layer (a Fetched.LayerDigest),
// present or not: it is not evicted until Release(holder). Call it after a
// restart for every prepared claim's layer.
func (p *Puller) Hold(holder, layerDigest string) error {
	d, err := parseLayer(layerDigest)
	if err != nil {
		return err
	}
	p.cache.hold(holder, d)
	return nil
}

// parseLayer parses a Fetched.LayerDigest.
func parseLayer(layerDigest string) (digest.Digest, error) {
	d, err := digest.Parse(layerDigest)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("layer digest %q is not sha256:<64 hex digits>: pass a Fetched.LayerDigest", layerDigest)
	}
	return d, nil
}

// Carry records that region (a device name) now carries the cached layer
// layerDigest (a Fetched.LayerDigest), or, with "", that what it carries
// came from elsewhere or is not known. Unlike a hold it never keeps a blob
// from eviction: blobs a region carries are evicted after all others, so
// that a later claim for what the region carries (which needs no
// programming then, but does after a reboot) finds its file cached.
func (p *Puller) Carry(region, layerDigest string) error {
	var d digest.Digest
	if layerDigest != "" {
		var err error
		if d, err = parseLayer(layerDigest); err != nil {
			return err
		}
	}
	p.cache.carry(region, d)
	return nil
}

// CheckAllowed refuses a reference to a registry outside
// --allowed-registries (ErrNotAllowed), as Fetch does: for a region that
// carries a reference's file already and is handed out without a Fetch.
func (p *Puller) CheckAllowed(reference string) error {
	ref, err := ParseReference(reference)
	if err != nil {
		return err
	}
	return p.client.checkAllowed(ref, reference)
}

// Release drops every hold of holder (on unprepare), so the files it held
// may be evicted.
func (p *Puller) Release(holder string) { p.cache.release(holder) }

// Stats returns the counters.
func (p *Puller) Stats() Stats {
	p.cache.mu.Lock()
	evictions := p.cache.evictions
	p.cache.mu.Unlock()
	return Stats{Pulls: p.pulls.Load(), PulledBytes: p.pulledBytes.Load(), CacheHits: p.hits.Load(),
		Evictions: evictions, CorruptBlobs: p.corrupt.Load()}
}

// Fetch returns the bitstream reference names, from the cache or pulled
// from its registry, verified end to end: the manifest against the
// reference's digest, its artifact type, layer and annotations, the file
// against the layer's digest and size, and the file's header against the
// annotations. reference must be pinned by digest (ErrReference). Errors
// match the package's sentinels and say what to fix; on error nothing is
// held for o.Holder that it did not hold before.
//
// The pull runs on even if ctx ends (other fetches may wait for it), for at
// most the pull timeout; ctx bounds only the wait.
func (p *Puller) Fetch(ctx context.Context, reference string, o FetchOptions) (*Fetched, error) {
	ref, err := ParseReference(reference)
	if err != nil {
		return nil, err
	}
	// Before the cache too: a registry no longer allowed serves nothing.
	if err := p.client.checkAllowed(ref, reference); err != nil {
		return nil, err
	}
	where := "bitstream " + reference
	a, manifestCached, err := p.manifest(ctx, ref, where)
	if err != nil {
		return nil, err
	}
	if err := checkWanted(where, a.Annotations, o); err != nil {
		return nil, err
	}
	if o.SHA256 != "" {
		if want, err := digest.Parse("sha256:" + strings.ToLower(strings.TrimPrefix(o.SHA256, "sha256:"))); err != nil || want != a.Layer.Digest {
			return nil, fmt.Errorf("%w: %s holds a file with sha256 %s, but sha256 pins %s: drop the sha256 pin (the reference's digest pins the file) or fix it",
				program.ErrChecksumMismatch, where, a.Layer.Digest.Encoded(), o.SHA256)
		}
	}

	holder := o.Holder
	if holder == "" {
		holder = transientHolderPrefix + strconv.FormatInt(p.transient.Add(1), 10)
	}
	added := p.cache.hold(holder, a.Layer.Digest)
	bs, layerCached, err := p.layer(ctx, ref, a, where)
	if r := (*refusedFor)(nil); errors.As(err, &r) && r.manifest != a.Digest {
		// This fetch joined a pull another manifest naming the layer
		// started, refused for that manifest's annotations: pull it
		// for this one's.
		bs, layerCached, err = p.layer(ctx, ref, a, where)
	}
	if err == nil {
		// The file may come from the cache or from a pull another
		// manifest naming the same layer started: check it against what
		// this caller's manifest declares.
		err = checkHeader(where, a.Annotations, bs)
	}
	if holder != o.Holder || (err != nil && added) {
		p.cache.unhold(holder, a.Layer.Digest)
	}
	if err != nil {
		return nil, err
	}
	if !manifestCached || !layerCached {
		// Keep the manifest beside the file it names (pulling the file
		// again after a corrupt copy dropped both).
		if err := p.cache.putManifest(a); err != nil {
			klog.FromContext(ctx).Error(err, "Cannot keep the manifest in the bitstream cache; the next fetch asks the registry again", "reference", reference)
		}
	}
	fromCache := manifestCached && layerCached
	if fromCache {
		p.hits.Add(1)
	}
	return &Fetched{
		Bitstream:      bs,
		Reference:      reference,
		ManifestDigest: a.Digest.String(),
		LayerDigest:    a.Layer.Digest.String(),
		Annotations:    a.Annotations,
		FromCache:      fromCache,
	}, nil
}

// ParseReference parses a digest-pinned bitstream reference
// (v1alpha1.ParseBitstreamRef); errors match ErrReference.
func ParseReference(reference string) (v1alpha1.BitstreamRef, error) {
	ref, err := v1alpha1.ParseBitstreamRef(reference)
	if err != nil {
		return ref, fmt.Errorf("%w %q: %w", ErrReference, reference, err)
	}
	return ref, nil
}

// manifest returns the checked manifest of ref, from the cache when there,
// else from the registry; concurrent calls for one digest share the work.
func (p *Puller) manifest(ctx context.Context, ref v1alpha1.BitstreamRef, where string) (*artifact, bool, error) {
	d := digest.Digest(ref.Digest)
	if raw, ok := p.cache.manifest(d); ok {
		a, err := parseManifest(where, raw, p.maxLayer)
		return a, true, err
	}
	v, err := p.shared(ctx, "manifest "+ref.Digest, func(ctx context.Context) (any, error) {
		return fetchManifest(ctx, p.client, ref, where, p.maxLayer)
	})
	if err != nil {
		return nil, false, err
	}
	return v.(*artifact), false, nil
}

// fetchManifest fetches the manifest ref names by digest from its registry
// and checks it.
func fetchManifest(ctx context.Context, c *Client, ref v1alpha1.BitstreamRef, where string, maxLayer int64) (*artifact, error) {
	what := "manifest " + ref.Digest + " in " + ref.Repository
	_, rc, err := c.repository(ref).Manifests().FetchReference(ctx, ref.Digest)
	if err != nil {
		return nil, c.classify(err, what, ref)
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return nil, c.classify(err, what, ref)
	}
	if got := digest.FromBytes(raw); got.String() != ref.Digest {
		return nil, errorf(program.ErrChecksumMismatch, "%w: registry %s sent %s with digest %s: the registry or something between serves wrong content; refusing it",
			ErrDigestMismatch, ref.Registry, what, got)
	}
	return parseManifest(where, raw, maxLayer)
}

// layer returns the bitstream in a's layer, verified: from the cache, or
// pulled into it.
func (p *Puller) layer(ctx context.Context, ref v1alpha1.BitstreamRef, a *artifact, where string) (*program.Bitstream, bool, error) {
	type result struct {
		bs     *program.Bitstream
		cached bool
	}
	v, err := p.shared(ctx, "layer "+a.Layer.Digest.String(), func(ctx context.Context) (any, error) {
		logger := klog.FromContext(ctx).WithValues("reference", ref.String(), "layer", a.Layer.Digest)
		d := a.Layer.Digest
		if path, ok := p.cache.lookup(d); ok {
			bs, err := p.verifyCached(where, a, path)
			if err == nil {
				p.cache.touch(d)
				return result{bs, true}, nil
			}
			logger.Error(err, "Cached bitstream failed verification; removing it and pulling it again")
			p.corrupt.Add(1)
			p.cache.drop(d)
		}
		if err := p.cache.reserve(d, a.Layer.Size); err != nil {
			return nil, err
		}
		start := time.Now()
		tmp, err := download(ctx, p.client, ref, a.Layer, p.cache.tmpDir())
		if err != nil {
			p.cache.unreserve(a.Layer.Size)
			return nil, err
		}
		bs, err := openLayer(where, a, tmp, p.openOpts)
		if errors.Is(err, ErrAnnotationMismatch) {
			// Fetches through other manifests that joined this pull
			// are not refused for this one's annotations.
			err = &refusedFor{manifest: a.Digest, err: err}
		}
		if err != nil {
			os.Remove(tmp)
			p.cache.unreserve(a.Layer.Size)
			return nil, err
		}
		if err := p.cache.commit(d, a.Layer.Size, tmp); err != nil {
			os.Remove(tmp)
			return nil, err
		}
		bs.Path = p.cache.blobPath(d)
		p.pulls.Add(1)
		p.pulledBytes.Add(a.Layer.Size)
		logger.V(2).Info("Pulled bitstream", "bytes", a.Layer.Size, "duration", time.Since(start))
		return result{bs, false}, nil
	})
	if err != nil {
		return nil, false, err
	}
	r := v.(result)
	return r.bs, r.cached, nil
}

// refusedFor is a pulled layer's refusal for the annotations of manifest,
// the one whose fetch started the pull.
type refusedFor struct {
	manifest digest.Digest
	err      error
}

func (r *refusedFor) Error() string { return r.err.Error() }
func (r *refusedFor) Unwrap() error { return r.err }

// verifyCached checks a cached file again: its content against the layer
// digest, and that it is a usable bitstream.
//
// It does not check the header against a's annotations: the file is
// intact (its digest says so) whatever a manifest naming it declares, and a
// manifest that lies about it must not get it removed from the cache that
// other claims' manifests share. Fetch checks every caller's annotations.
func (p *Puller) verifyCached(where string, a *artifact, path string) (*program.Bitstream, error) {
	if err := p.cache.verify(a.Layer.Digest, a.Layer.Size); err != nil {
		return nil, err
	}
	return openBlob(where, a, path, p.openOpts)
}

// openLayer opens the file at path, whose content is a's verified layer,
// checks its header against a's annotations and sets its SHA256 to the
// layer's digest.
func openLayer(where string, a *artifact, path string, opts []program.OpenOption) (*program.Bitstream, error) {
	bs, err := openBlob(where, a, path, opts)
	if err != nil {
		return nil, err
	}
	if err := checkHeader(where, a.Annotations, bs); err != nil {
		return nil, err
	}
	return bs, nil
}

// openBlob opens the file at path, whose content is a's verified layer,
// and sets its SHA256 to the layer's digest; it does not look at a's
// annotations.
func openBlob(where string, a *artifact, path string, opts []program.OpenOption) (*program.Bitstream, error) {
	bs, err := program.Open(path, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: the file in its layer is not a usable bitstream: %w", where, err)
	}
	bs.SHA256 = a.Layer.Digest.Encoded()
	return bs, nil
}

// download streams layer from ref's repository into a new file in dir,
// hashing it as it writes, and returns the file's path once its size and
// digest are those of layer. The file is read-only. It is not fsynced: a
// cached file is hashed again on every use, so one a crash damaged is
// found and pulled again, and fsync would double the time of a pull.
func download(ctx context.Context, c *Client, ref v1alpha1.BitstreamRef, layer ocispec.Descriptor, dir string) (path string, err error) {
	what := "blob " + layer.Digest.String() + " in " + ref.Repository
	rc, err := c.repository(ref).Blobs().Fetch(ctx, layer)
	if err != nil {
		return "", c.classify(err, what, ref)
	}
	defer rc.Close()
	f, err := os.CreateTemp(dir, "layer-*")
	if err != nil {
		return "", fmt.Errorf("bitstream cache: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.LimitReader(rc, layer.Size+1), make([]byte, copyBuffer))
	if err != nil {
		return "", c.classify(err, what, ref)
	}
	if got := digest.NewDigest(digest.SHA256, h); n != layer.Size || got != layer.Digest {
		return "", errorf(program.ErrChecksumMismatch, "%w: registry %s sent %d bytes hashing to %s for %s of %d bytes: refusing them; push the bitstream again if the registry's copy is damaged",
			ErrDigestMismatch, ref.Registry, n, got, what, layer.Size)
	}
	if err := f.Chmod(0o444); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return f.Name(), nil
}

// shared runs fn once for concurrent calls with the same key. fn gets a
// context that keeps ctx's values but not its cancellation, bounded by the
// pull timeout; each caller waits only as long as its own ctx allows.
func (p *Puller) shared(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	ch := p.flight.DoChan(key, func() (any, error) {
		work, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.pullTimeout)
		defer cancel()
		return fn(work)
	})
	if p.onWait != nil {
		p.onWait(key)
	}
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("gave up waiting for %s (the pull goes on for other claims): %w", key, ctx.Err())
	}
}
