package oci

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Media types of the bitstream artifact.
const (
	// ArtifactType is the artifactType of a bitstream's manifest.
	ArtifactType = "application/vnd.dev.dra.fpga.bitstream.v1"
	// LayerMediaType is the media type of the one layer, which holds the
	// bitstream file unchanged (not compressed: the formats compress where
	// it pays, an AOCX carries a gzipped GBS).
	LayerMediaType = "application/vnd.dev.dra.fpga.bitstream.layer.v1"
)

// Annotations of a bitstream's manifest. Values are those of the file's
// header; a node checks each against the file it pulls.
const (
	// AnnotationFormat is the file format: "gbs" or "aocx" (program.Format).
	AnnotationFormat = "dev.dra.fpga.bitstream.format"
	// AnnotationVendor is the FPGA vendor the format belongs to: "intel"
	// for GBS and AOCX.
	AnnotationVendor = "dev.dra.fpga.bitstream.vendor"
	// AnnotationInterfaceID is the interface ID (FIM) of the regions the
	// bitstream fits: 32 lowercase hex digits.
	AnnotationInterfaceID = "dev.dra.fpga.bitstream.interface-id"
	// AnnotationAFUID is the ID the port reports once the bitstream is
	// loaded (a GBS's accelerator-type-uuid): 32 lowercase hex digits.
	AnnotationAFUID = "dev.dra.fpga.bitstream.afu-id"
	// annotationTitle names the layer's file, as oras does.
	annotationTitle = "org.opencontainers.image.title"
)

// VendorIntel is the vendor of GBS and AOCX bitstreams.
const VendorIntel = "intel"

// vendors maps each supported format to its vendor.
var vendors = map[program.Format]string{
	program.FormatGBS:  VendorIntel,
	program.FormatAOCX: VendorIntel,
}

// Annotations are the IDs a bitstream artifact declares.
type Annotations struct {
	Format      program.Format `json:"format"`
	Vendor      string         `json:"vendor"`
	InterfaceID string         `json:"interfaceID"`
	AFUID       string         `json:"afuID"`
}

// annotationsOf returns what an artifact holding bs declares.
func annotationsOf(bs *program.Bitstream) Annotations {
	return Annotations{Format: bs.Format, Vendor: vendors[bs.Format], InterfaceID: bs.InterfaceID, AFUID: bs.AFUID}
}

// Map returns a as manifest annotations.
func (a Annotations) Map() map[string]string {
	return map[string]string{
		AnnotationFormat:      string(a.Format),
		AnnotationVendor:      a.Vendor,
		AnnotationInterfaceID: a.InterfaceID,
		AnnotationAFUID:       a.AFUID,
	}
}

// parseAnnotations reads and checks the annotations of a manifest: every
// key present, a supported format with its vendor, canonical usable IDs.
// where names the manifest in errors.
func parseAnnotations(where string, m map[string]string) (Annotations, error) {
	a := Annotations{
		Format:      program.Format(m[AnnotationFormat]),
		Vendor:      m[AnnotationVendor],
		InterfaceID: m[AnnotationInterfaceID],
		AFUID:       m[AnnotationAFUID],
	}
	for _, k := range []string{AnnotationFormat, AnnotationVendor, AnnotationInterfaceID, AnnotationAFUID} {
		if _, ok := m[k]; !ok {
			return Annotations{}, notArtifactf("%s has no annotation %s: push bitstreams with `fpga-dra-driver bitstream push`, which sets it from the file's header", where, k)
		}
	}
	vendor, ok := vendors[a.Format]
	if !ok {
		return Annotations{}, notArtifactf("%s: annotation %s is %q: this driver loads gbs and aocx bitstreams", where, AnnotationFormat, a.Format)
	}
	if a.Vendor != vendor {
		return Annotations{}, notArtifactf("%s: annotation %s is %q, but %s bitstreams are %q: push the artifact again with `fpga-dra-driver bitstream push`", where, AnnotationVendor, a.Vendor, a.Format, vendor)
	}
	for _, id := range []struct{ key, value string }{{AnnotationInterfaceID, a.InterfaceID}, {AnnotationAFUID, a.AFUID}} {
		c, err := discovery.CanonicalID(id.value)
		switch {
		case err != nil:
			return Annotations{}, notArtifactf("%s: annotation %s is %q: %v: it must be 32 lowercase hex digits; push the artifact again with `fpga-dra-driver bitstream push`", where, id.key, id.value, err)
		case c != id.value:
			return Annotations{}, notArtifactf("%s: annotation %s is %q, not canonical (%q): push the artifact again with `fpga-dra-driver bitstream push`", where, id.key, id.value, c)
		case c == discovery.AllF:
			return Annotations{}, notArtifactf("%s: annotation %s is all f, the ID of an unusable region or function: rebuild the bitstream", where, id.key)
		}
	}
	return a, nil
}

// checkHeader checks that the bitstream file bs, as parsed from the layer,
// carries what the annotations a declare.
func checkHeader(where string, a Annotations, bs *program.Bitstream) error {
	got := annotationsOf(bs)
	if got == a {
		return nil
	}
	return errorf(program.ErrInvalidBitstream, "%w: %s declares %s interface %s AFU %s, but the file in its layer is %s interface %s AFU %s: the artifact was altered or pushed by a tool that mislabels it; push the file again with `fpga-dra-driver bitstream push`",
		ErrAnnotationMismatch, where, a.Format, a.InterfaceID, a.AFUID, got.Format, got.InterfaceID, got.AFUID)
}

// checkWanted checks the annotations against what the caller needs, before
// anything large is pulled.
func checkWanted(where string, a Annotations, o FetchOptions) error {
	if len(o.InterfaceIDs) > 0 {
		want := make([]string, len(o.InterfaceIDs))
		for i, id := range o.InterfaceIDs {
			var err error
			if want[i], err = discovery.CanonicalID(id); err != nil {
				return fmt.Errorf("interface ID %q: %w", id, err)
			}
		}
		if !slices.Contains(want, a.InterfaceID) {
			return fmt.Errorf("%w: %s is built for interface %s, but the region has interface %s: push a build for this region's FIM/interface or choose a region with interface %s",
				program.ErrInterfaceMismatch, where, a.InterfaceID, strings.Join(want, " or "), a.InterfaceID)
		}
	}
	if o.AFUID != "" {
		want, err := discovery.CanonicalID(o.AFUID)
		if err != nil {
			return fmt.Errorf("AFU ID %q: %w", o.AFUID, err)
		}
		if a.AFUID != want {
			return fmt.Errorf("%w: %s carries AFU %s, not the requested afuID %s: reference the artifact of AFU %s, or fix afuID",
				program.ErrInvalidBitstream, where, a.AFUID, want, want)
		}
	}
	return nil
}
