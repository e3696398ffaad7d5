package oci

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// copyBuffer is the size of the buffer a download or a hash reads with.
const copyBuffer = 1 << 20

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
