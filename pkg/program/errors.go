package program

import (
	"errors"
	"fmt"
)

// Sentinel errors let callers classify a failure for metrics and events with
// errors.Is. Every error this package returns for one of these conditions
// wraps the matching sentinel; the message around it names the file, the IDs
// and the fix.
var (
	// ErrInvalidBitstream: a file is not a GBS, AOCX or xclbin bitstream,
	// or is truncated, corrupt or carries unusable IDs.
	ErrInvalidBitstream = errors.New("invalid bitstream")
	// ErrNotFound: the repository holds no bitstream for the requested IDs
	// or name.
	ErrNotFound = errors.New("bitstream not found")
	// ErrBitstreamChanged: a file no longer carries the IDs it was indexed
	// with.
	ErrBitstreamChanged = errors.New("bitstream changed since it was indexed")
	// ErrInterfaceMismatch: the bitstream is built for another interface
	// (FIM) than the card's partial-reconfiguration region.
	ErrInterfaceMismatch = errors.New("interface mismatch")
	// ErrFormatMismatch: the bitstream's format is not one the card's
	// family loads (Family.Formats), as an xclbin for an Intel card or a
	// GBS for an AMD/Xilinx (XRT) card.
	ErrFormatMismatch = errors.New("bitstream format does not fit the card")
	// ErrChecksumMismatch: the file's sha256 differs from the pinned one.
	ErrChecksumMismatch = errors.New("checksum mismatch")
	// ErrProgramFailed: the backend (kernel, hardware or simulator) refused
	// or failed the partial reconfiguration.
	ErrProgramFailed = errors.New("programming failed")
	// ErrVerifyFailed: after programming, the port does not report the
	// bitstream's AFU ID.
	ErrVerifyFailed = errors.New("verification failed")
	// ErrDevicesChanged: the card's device nodes were re-enumerated since
	// discovery, so nothing was issued; it says nothing of the device's
	// health (no quarantine) and a retry after the next discovery pass
	// succeeds.
	ErrDevicesChanged = errors.New("device nodes changed since discovery")
)

// invalidError reports bad bitstream content. Its message is the plain
// description ("<file>: <what is wrong>: <fix>"); errors.Is matches it
// against ErrInvalidBitstream, and Unwrap exposes the underlying cause.
type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == ErrInvalidBitstream }

// invalidf formats an error that matches ErrInvalidBitstream.
func invalidf(format string, args ...any) error {
	return &invalidError{err: fmt.Errorf(format, args...)}
}

// notBitstreamError marks a file that starts with none of the GBS, ELF and
// xclbin magics: the repository logs those quietly, unlike broken
// bitstreams.
type notBitstreamError struct{ invalidError }

func isNotBitstream(err error) bool {
	var nb *notBitstreamError
	return errors.As(err, &nb)
}
