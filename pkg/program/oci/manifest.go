package oci

import (
	"encoding/json"
	"fmt"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// maxManifestBytes caps the manifest read from a registry or the cache: a
// bitstream manifest is well under a kilobyte.
const maxManifestBytes = 64 << 10

// artifact is a checked bitstream manifest.
type artifact struct {
	// Digest is the manifest's digest (of raw).
	Digest digest.Digest
	raw    []byte
	// Layer is the one layer: its digest names the file in the cache.
	Layer       ocispec.Descriptor
	Annotations Annotations
}

// buildManifest returns the manifest of a bitstream artifact whose one
// layer is layer. It is deterministic: the same file and annotations give
// the same digest, so pushing a file twice pins the same reference.
func buildManifest(layer ocispec.Descriptor, a Annotations) ([]byte, error) {
	m := ocispec.Manifest{
		Versioned:    specs.Versioned{SchemaVersion: 2},
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       ocispec.DescriptorEmptyJSON,
		Layers:       []ocispec.Descriptor{layer},
		Annotations:  a.Map(),
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode bitstream manifest: %w", err)
	}
	return raw, nil
}

// parseManifest checks that raw, the content of the manifest named where,
// is a bitstream artifact whose layer is at most maxLayer bytes, and
// returns it. It does not check raw against a digest.
func parseManifest(where string, raw []byte, maxLayer int64) (*artifact, error) {
	if len(raw) > maxManifestBytes {
		return nil, notArtifactf("%s is %d bytes, more than the %d a bitstream manifest needs: it is not a bitstream artifact", where, len(raw), maxManifestBytes)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, notArtifactf("%s is not a JSON image manifest (%v): reference a bitstream artifact pushed with `fpga-dra-driver bitstream push`", where, err)
	}
	if m.SchemaVersion != 2 || m.MediaType != ocispec.MediaTypeImageManifest {
		return nil, notArtifactf("%s has schemaVersion %d and mediaType %q, want 2 and %q (an image index or a Docker manifest is no bitstream): reference a bitstream artifact pushed with `fpga-dra-driver bitstream push`",
			where, m.SchemaVersion, m.MediaType, ocispec.MediaTypeImageManifest)
	}
	if m.ArtifactType != ArtifactType {
		return nil, notArtifactf("%s has artifactType %q, want %q: it is not a bitstream (is it a container image?); push the bitstream with `fpga-dra-driver bitstream push`",
			where, m.ArtifactType, ArtifactType)
	}
	if len(m.Layers) != 1 {
		return nil, notArtifactf("%s has %d layers, want exactly 1 holding the bitstream file: push the file with `fpga-dra-driver bitstream push`", where, len(m.Layers))
	}
	l := m.Layers[0]
	if l.MediaType != LayerMediaType {
		return nil, notArtifactf("%s: the layer's mediaType is %q, want %q: push the file with `fpga-dra-driver bitstream push`", where, l.MediaType, LayerMediaType)
	}
	if l.Digest.Validate() != nil || l.Digest.Algorithm() != digest.SHA256 {
		return nil, notArtifactf("%s: the layer's digest %q is not a sha256 digest: push the file with `fpga-dra-driver bitstream push`", where, l.Digest)
	}
	if l.Size <= 0 {
		return nil, notArtifactf("%s: the layer's size is %d: a bitstream file is never empty", where, l.Size)
	}
	if l.Size > maxLayer {
		return nil, errorf(program.ErrInvalidBitstream, "%w: %s: the layer is %d bytes, more than the %d-byte cap: raise the node's --"+FlagMaxLayerSize+" if the bitstream is genuine",
			ErrTooLarge, where, l.Size, maxLayer)
	}
	a, err := parseAnnotations(where, m.Annotations)
	if err != nil {
		return nil, err
	}
	return &artifact{Digest: digest.FromBytes(raw), raw: raw, Layer: l, Annotations: a}, nil
}
