package oci

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Pushed says what Push stored.
type Pushed struct {
	// Reference is the reference to pin: the one given, with the
	// manifest's digest.
	Reference      string
	ManifestDigest string
	LayerDigest    string
	Size           int64
	Annotations    Annotations
}

// Push parses the bitstream file (a malformed one is refused, matching
// program.ErrInvalidBitstream) and pushes it as a bitstream artifact to
// reference, REGISTRY/REPOSITORY[:TAG] without a digest, tagging the
// manifest when a tag is given. Blobs the registry has already are not sent
// again. The manifest is deterministic: pushing the same file under the same
// name gives the same digest.
func (c *Client) Push(ctx context.Context, file, reference string, opts ...program.OpenOption) (*Pushed, error) {
	ref, err := v1alpha1.ParseBitstreamRepository(reference)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrReference, reference, err)
	}
	bs, err := program.Open(file, append(opts, program.WithDigest())...)
	if err != nil {
		return nil, err
	}
	a := annotationsOf(bs)
	if a.Vendor == "" {
		return nil, fmt.Errorf("%s is a %s bitstream, which the artifact format does not cover yet: push gbs or aocx files", file, bs.Format)
	}
	layer := ocispec.Descriptor{
		MediaType:   LayerMediaType,
		Digest:      digest.NewDigestFromEncoded(digest.SHA256, bs.SHA256),
		Size:        bs.Size,
		Annotations: map[string]string{annotationTitle: filepath.Base(file)},
	}
	raw, err := buildManifest(layer, a)
	if err != nil {
		return nil, err
	}
	manifest := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, raw)
	manifest.ArtifactType = ArtifactType

	repo := c.repository(ref)
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("open bitstream: %w", err)
	}
	defer f.Close()
	if err := pushBlob(ctx, c, repo, ref, layer, f); err != nil {
		return nil, err
	}
	empty := ocispec.DescriptorEmptyJSON
	if err := pushBlob(ctx, c, repo, ref, empty, bytes.NewReader(empty.Data)); err != nil {
		return nil, err
	}
	what := "manifest " + manifest.Digest.String() + " in " + ref.Repository
	if ref.Tag != "" {
		err = repo.PushReference(ctx, manifest, bytes.NewReader(raw), ref.Tag)
	} else {
		err = repo.Push(ctx, manifest, bytes.NewReader(raw))
	}
	if err != nil {
		return nil, c.classify(err, what, ref)
	}
	ref.Digest = manifest.Digest.String()
	return &Pushed{Reference: ref.String(), ManifestDigest: ref.Digest, LayerDigest: layer.Digest.String(), Size: bs.Size, Annotations: a}, nil
}

// pushBlob uploads the blob desc from r unless the repository has it.
func pushBlob(ctx context.Context, c *Client, repo *remote.Repository, ref v1alpha1.BitstreamRef, desc ocispec.Descriptor, r io.Reader) error {
	what := "blob " + desc.Digest.String() + " in " + ref.Repository
	exists, err := repo.Blobs().Exists(ctx, desc)
	if err != nil {
		return c.classify(err, what, ref)
	}
	if exists {
		return nil
	}
	if err := repo.Blobs().Push(ctx, desc, r); err != nil {
		return c.classify(err, what, ref)
	}
	return nil
}
