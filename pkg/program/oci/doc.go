// Package oci moves FPGA bitstreams through OCI registries: the artifact
// format (one layer holding the bitstream file, annotations carrying the IDs
// a node checks before programming), Push and Inspect for administrators,
// and the node's Puller, which fetches a digest-pinned bitstream once,
// verifies it end to end and keeps it in a content-addressed cache.
//
// # The artifact
//
// An OCI 1.1 image manifest with
//
//   - artifactType ArtifactType,
//   - the empty config (application/vnd.oci.empty.v1+json),
//   - exactly one layer of media type LayerMediaType: the bitstream file
//     as it is (GBS or AOCX), with org.opencontainers.image.title set to its
//     file name,
//   - the manifest annotations AnnotationFormat, AnnotationVendor,
//     AnnotationInterfaceID and AnnotationAFUID, taken from the file's
//     header when it is pushed.
//
// Any OCI 1.1 client (oras) and registry handle it. A node refuses an
// artifact whose manifest breaks any of these rules, whose annotations
// disagree with the header of the file in the layer, or whose layer is
// larger than its cap.
//
// # References
//
// A node pulls only by digest: REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST, the
// syntax of api/v1alpha1.ParseBitstreamRef (the same check runs at
// admission). A tag alone is refused: it can be moved to other content.
package oci
