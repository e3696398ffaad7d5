package oci

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"
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
