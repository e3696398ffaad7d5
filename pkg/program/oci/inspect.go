package oci

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Inspection is what a node would see of a bitstream artifact.
type Inspection struct {
	// Reference is the reference pinned by the manifest's digest: what a
	// claim must name.
	Reference      string
	ManifestDigest string
	LayerDigest    string
	Size           int64
	Annotations    Annotations
	// Bitstream is the header of the file in the layer, as parsed after
	// verification; the file itself is gone (Path is empty).
	Bitstream *program.Bitstream
}

// Inspect fetches the artifact reference names and verifies it as a node
// does: the manifest against its digest and the artifact rules, the layer
// (at most maxLayerSize bytes, DefaultMaxLayerSize when 0) against its
// digest, and the file's header against the annotations. Unlike a node it
// accepts a reference without a digest, REGISTRY/REPOSITORY:TAG, and
// resolves the tag, so that an administrator can learn the digest to pin.
// The layer is downloaded into a temporary directory and removed.
func (c *Client) Inspect(ctx context.Context, reference string, maxLayerSize int64, opts ...program.OpenOption) (*Inspection, error) {
	if maxLayerSize <= 0 {
		maxLayerSize = DefaultMaxLayerSize
	}
	var (
		ref v1alpha1.BitstreamRef
		err error
	)
	if strings.Contains(reference, "@") {
		ref, err = v1alpha1.ParseBitstreamRef(reference)
	} else {
		ref, err = v1alpha1.ParseBitstreamRepository(reference)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %q: %w", ErrReference, reference, err)
	}
	if ref.Digest == "" {
		tag := ref.Tag
		if tag == "" {
			tag = "latest"
		}
		desc, err := c.repository(ref).Resolve(ctx, tag)
		if err != nil {
			return nil, c.classify(err, "tag "+tag+" of "+ref.Repository, ref)
		}
		if desc.Digest.Validate() != nil || desc.Digest.Algorithm() != digest.SHA256 {
			return nil, fmt.Errorf("%w: registry %s names tag %s with digest %q: the driver pins sha256 digests only", ErrNotBitstreamArtifact, ref.Registry, tag, desc.Digest)
		}
		ref.Digest = desc.Digest.String()
	}
	where := "bitstream " + ref.String()
	a, err := fetchManifest(ctx, c, ref, where, maxLayerSize)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fpga-dra-inspect-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path, err := download(ctx, c, ref, a.Layer, dir)
	if err != nil {
		return nil, err
	}
	bs, err := openLayer(where, a, path, opts)
	if err != nil {
		return nil, err
	}
	bs.Path = ""
	return &Inspection{Reference: ref.String(), ManifestDigest: a.Digest.String(), LayerDigest: a.Layer.Digest.String(),
		Size: a.Layer.Size, Annotations: a.Annotations, Bitstream: bs}, nil
}
