package oci

import (
	"errors"
	"fmt"

	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// Sentinel errors classify failures with errors.Is. Where a failure has a
// counterpart in package program, the error matches that sentinel too, so
// callers that classify program errors (metrics, events) need nothing new:
// ErrNotFound also matches program.ErrNotFound, ErrDigestMismatch
// program.ErrChecksumMismatch, and ErrNotBitstreamArtifact, ErrTooLarge and
// ErrAnnotationMismatch program.ErrInvalidBitstream. An interface that does
// not fit the region matches program.ErrInterfaceMismatch.
var (
	// ErrReference: a reference is malformed or not pinned by digest.
	ErrReference = errors.New("invalid bitstream reference")
	// ErrUnreachable: the registry did not answer, after retries.
	ErrUnreachable = errors.New("registry unreachable")
	// ErrUnauthorized: the registry refused the node's credentials (or their
	// absence).
	ErrUnauthorized = errors.New("registry refused access")
	// ErrNotAllowed: the reference names a registry outside the node's
	// --allowed-registries (it matches program.ErrNotFound too).
	ErrNotAllowed = errors.New("registry not allowed")
	// ErrNotFound: the registry has no such manifest or blob.
	ErrNotFound = errors.New("not found in the registry")
	// ErrDigestMismatch: content does not hash to the digest naming it.
	ErrDigestMismatch = errors.New("digest mismatch")
	// ErrNotBitstreamArtifact: the manifest is not a bitstream artifact of
	// this driver (artifact type, layers, media type, annotations).
	ErrNotBitstreamArtifact = errors.New("not a bitstream artifact")
	// ErrTooLarge: the layer is larger than the configured cap.
	ErrTooLarge = errors.New("bitstream layer too large")
	// ErrAnnotationMismatch: the annotations disagree with the header of
	// the file in the layer.
	ErrAnnotationMismatch = errors.New("annotations disagree with the bitstream")
	// ErrCacheFull: the cache cannot make room without evicting bitstreams
	// that prepared claims hold.
	ErrCacheFull = errors.New("bitstream cache full")
)

// classifiedError is an error whose message is err's and which also matches
// also.
type classifiedError struct {
	err  error
	also error
}

func (e *classifiedError) Error() string   { return e.err.Error() }
func (e *classifiedError) Unwrap() []error { return []error{e.err, e.also} }

// errorf formats an error (with %w as usual) that also matches the
// sentinel also, without repeating its text.
func errorf(also error, format string, args ...any) error {
	return &classifiedError{err: fmt.Errorf(format, args...), also: also}
}

// notArtifactf formats an error that matches ErrNotBitstreamArtifact and
// program.ErrInvalidBitstream.
func notArtifactf(format string, args ...any) error {
	return errorf(program.ErrInvalidBitstream, "%w: "+format, append([]any{ErrNotBitstreamArtifact}, args...)...)
}
