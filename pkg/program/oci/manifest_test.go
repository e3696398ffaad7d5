package oci

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// validManifest returns the JSON of a manifest Push would write for a
// layer of 1000 bytes, after edit changed it.
func validManifest(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	layer := ocispec.Descriptor{MediaType: LayerMediaType, Digest: digest.FromString("layer"), Size: 1000}
	raw, err := buildManifest(layer, Annotations{Format: program.FormatGBS, Vendor: VendorIntel, InterfaceID: testIf, AFUID: testAFU})
	if err != nil {
		t.Fatal(err)
	}
	if edit == nil {
		return raw
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	raw, err = json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func layer0(m map[string]any) map[string]any { return m["layers"].([]any)[0].(map[string]any) }
func annotations(m map[string]any) map[string]any {
	return m["annotations"].(map[string]any)
}

func TestParseManifest(t *testing.T) {
	tests := []struct {
		name string
		edit func(m map[string]any)
		// wantErr holds substrings; empty means valid.
		wantErr []string
		// tooLarge: the error must match ErrTooLarge, not
		// ErrNotBitstreamArtifact.
		tooLarge bool
	}{
		{name: "as pushed"},
		{name: "extra annotation", edit: func(m map[string]any) { annotations(m)["org.opencontainers.image.created"] = "2024-01-01T00:00:00Z" }},
		{name: "not JSON", edit: func(m map[string]any) { m["layers"] = "x" }, wantErr: []string{"is not a JSON image manifest"}},
		{name: "image index", edit: func(m map[string]any) { m["mediaType"] = ocispec.MediaTypeImageIndex },
			wantErr: []string{`mediaType "` + ocispec.MediaTypeImageIndex + `"`}},
		{name: "schema version 1", edit: func(m map[string]any) { m["schemaVersion"] = 1 }, wantErr: []string{"schemaVersion 1"}},
		{name: "no artifact type", edit: func(m map[string]any) { delete(m, "artifactType") }, wantErr: []string{`artifactType ""`}},
		{name: "other artifact type", edit: func(m map[string]any) { m["artifactType"] = "application/vnd.cncf.helm.config.v1+json" },
			wantErr: []string{`artifactType "application/vnd.cncf.helm.config.v1+json", want "` + ArtifactType + `"`}},
		{name: "no layers", edit: func(m map[string]any) { m["layers"] = []any{} }, wantErr: []string{"has 0 layers"}},
		{name: "layer media type", edit: func(m map[string]any) { layer0(m)["mediaType"] = ocispec.MediaTypeImageLayer },
			wantErr: []string{"the layer's mediaType"}},
		{name: "sha512 layer", edit: func(m map[string]any) { layer0(m)["digest"] = digest.SHA512.FromString("x").String() },
			wantErr: []string{"is not a sha256 digest"}},
		{name: "malformed layer digest", edit: func(m map[string]any) { layer0(m)["digest"] = "sha256:xyz" },
			wantErr: []string{`"sha256:xyz" is not a sha256 digest`}},
		{name: "empty layer", edit: func(m map[string]any) { layer0(m)["size"] = 0 }, wantErr: []string{"size is 0"}},
		{name: "layer over the cap", edit: func(m map[string]any) { layer0(m)["size"] = 1 << 40 },
			wantErr: []string{"more than the 1048576-byte cap"}, tooLarge: true},
		{name: "annotation missing", edit: func(m map[string]any) { delete(annotations(m), AnnotationAFUID) },
			wantErr: []string{"has no annotation " + AnnotationAFUID}},
		{name: "no annotations", edit: func(m map[string]any) { delete(m, "annotations") }, wantErr: []string{"has no annotation"}},
		{name: "unknown format", edit: func(m map[string]any) { annotations(m)[AnnotationFormat] = "xclbin" },
			wantErr: []string{`annotation ` + AnnotationFormat + ` is "xclbin"`}},
		{name: "wrong vendor", edit: func(m map[string]any) { annotations(m)[AnnotationVendor] = "amd" },
			wantErr: []string{`is "amd", but gbs bitstreams are "intel"`}},
		{name: "dashed ID", edit: func(m map[string]any) { annotations(m)[AnnotationInterfaceID] = "69528db6-eb31-577a-8c36-68f9faa081f6" },
			wantErr: []string{"not canonical"}},
		{name: "short ID", edit: func(m map[string]any) { annotations(m)[AnnotationAFUID] = "d8424dc4" },
			wantErr: []string{`annotation ` + AnnotationAFUID + ` is "d8424dc4"`}},
		{name: "all-f ID", edit: func(m map[string]any) { annotations(m)[AnnotationAFUID] = strings.Repeat("f", 32) },
			wantErr: []string{"is all f"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := validManifest(t, tc.edit)
			a, err := parseManifest("bitstream R", raw, 1<<20)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("parseManifest() error = %v", err)
				}
				if a.Digest != digest.FromBytes(raw) || a.Layer.Size != 1000 || a.Annotations.AFUID != testAFU {
					t.Errorf("parseManifest() = %+v", a)
				}
				return
			}
			want := ErrNotBitstreamArtifact
			if tc.tooLarge {
				want = ErrTooLarge
			}
			wantError(t, err, []error{want, program.ErrInvalidBitstream}, append(tc.wantErr, "bitstream R")...)
		})
	}
	_, err := parseManifest("bitstream R", make([]byte, maxManifestBytes+1), 1<<20)
	if !errors.Is(err, ErrNotBitstreamArtifact) {
		t.Errorf("parseManifest(oversized) error = %v, want ErrNotBitstreamArtifact", err)
	}
}

// FuzzParseManifest checks that parsing any manifest never panics, that an
// accepted one satisfies every rule a node relies on, and that the
// annotations it yields build a manifest that parses to the same.
func FuzzParseManifest(f *testing.F) {
	f.Add(validManifest(f, nil))
	f.Add(validManifest(f, func(m map[string]any) { annotations(m)[AnnotationFormat] = "aocx" }))
	f.Add(validManifest(f, func(m map[string]any) { m["layers"] = append(m["layers"].([]any), layer0(m)) }))
	f.Add(validManifest(f, func(m map[string]any) { layer0(m)["size"] = -1 }))
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"` + ArtifactType + `","layers":[{}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		const maxLayer = 1 << 20
		a, err := parseManifest("fuzz", raw, maxLayer)
		if err != nil {
			if a != nil {
				t.Fatalf("parseManifest() = %+v with error %v", a, err)
			}
			if !errors.Is(err, program.ErrInvalidBitstream) {
				t.Fatalf("parseManifest() error %v does not match program.ErrInvalidBitstream", err)
			}
			return
		}
		if a.Layer.MediaType != LayerMediaType || a.Layer.Size <= 0 || a.Layer.Size > maxLayer ||
			a.Layer.Digest.Validate() != nil || a.Layer.Digest.Algorithm() != digest.SHA256 || a.Digest != digest.FromBytes(raw) {
			t.Fatalf("parseManifest() accepted %s as %+v", raw, a)
		}
		if vendors[a.Annotations.Format] != a.Annotations.Vendor || len(a.Annotations.AFUID) != 32 || len(a.Annotations.InterfaceID) != 32 {
			t.Fatalf("parseManifest() accepted annotations %+v", a.Annotations)
		}
		rebuilt, err := buildManifest(a.Layer, a.Annotations)
		if err != nil {
			t.Fatal(err)
		}
		b, err := parseManifest("rebuilt", rebuilt, maxLayer)
		if err != nil || b.Annotations != a.Annotations || b.Layer.Digest != a.Layer.Digest || b.Layer.Size != a.Layer.Size {
			t.Fatalf("rebuilt manifest %s parses to %+v, %v; want %+v", rebuilt, b, err, a)
		}
	})
}
