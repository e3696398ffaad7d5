package program

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// Defaults for LoadOptions.
const (
	DefaultVerifyTimeout  = 10 * time.Second
	DefaultVerifyInterval = 20 * time.Millisecond
)

// LoadOptions tunes Load. The zero value is ready to use.
type LoadOptions struct {
	// SHA256 pins the digest of the bitstream file (64 hex digits,
	// optionally prefixed "sha256:"); empty for no pin.
	SHA256 string
	// VerifyTimeout bounds how long afu_id may stay busy (EBUSY, the port
	// still disabled), or an XRT card's xclbinuuid empty, after
	// programming; DefaultVerifyTimeout when <= 0.
	VerifyTimeout time.Duration
	// VerifyInterval is the pause between reads of a busy afu_id;
	// DefaultVerifyInterval when <= 0.
	VerifyInterval time.Duration
	// ReadTimeout bounds each read of the AFU ID attribute while
	// verifying; discovery.DefaultReadTimeout when <= 0. A read that
	// outlasts it (a wedged device) fails the load with ErrVerifyFailed
	// and discovery.ErrReadTimedOut; the stuck read is left behind, and
	// the attribute is not read again until it returns (see
	// discovery.ReadBounded).
	ReadTimeout time.Duration

	// readAFUID replaces (*discovery.Port).ReadAFUID in tests, which cannot
	// make a regular file return EBUSY.
	readAFUID func(*discovery.Port) (string, error)
}

// Result describes one Load. Load fills it as far as it got, also on error.
type Result struct {
	// Programmer is the backend's Name.
	Programmer  string
	Path        string
	InterfaceID string
	AFUID       string
	// SHA256 is the digest of the file as read for this load.
	SHA256 string
	// FileBytes is how much was read; PayloadBytes how much was handed to
	// the programmer (padded to a multiple of 4).
	FileBytes    int64
	PayloadBytes int64
	// ReadDuration covers reading, hashing and re-parsing the file;
	// VerifyDuration reading back afu_id.
	ReadDuration    time.Duration
	ProgramDuration time.Duration
	VerifyDuration  time.Duration
	TotalDuration   time.Duration
}

// Load programs bs into the region behind port on card, the same way for
// every backend:
//
//  1. the bitstream's format must be one the card's family loads
//     (Family.Formats: a GBS or AOCX for an Intel card, an xclbin for an
//     XRT card; ErrFormatMismatch);
//  2. the card's interface ID must equal the bitstream's (ErrInterfaceMismatch);
//  3. the file is read once, hashed and checked against opts.SHA256
//     (ErrChecksumMismatch) and against the IDs bs was opened with
//     (ErrBitstreamChanged);
//  4. p.Program gets the payload: the padded raw bitstream of a GBS or AOCX,
//     the whole xclbin file as it was hashed (failures match
//     ErrProgramFailed, unless ctx ended: then they wrap its cause);
//  5. the port's AFU ID attribute (port.AFUIDPath(): afu_id, or through
//     the family's LoadedReader, an XRT card's xclbinuuid) is read back,
//     waiting while it reports EBUSY or ErrNotLoaded for at most
//     opts.VerifyTimeout, and must equal bs.AFUID (ErrVerifyFailed).
//
// Steps 1 and 2 run before anything is read or programmed. Each read of
// step 5 is bounded by ctx and opts.ReadTimeout, so Load returns within
// about opts.VerifyTimeout + opts.ReadTimeout of programming, or soon after
// ctx ends, however the attribute's reads block. Callers must not load one
// port twice at once.
func Load(ctx context.Context, p Programmer, card *discovery.Card, port *discovery.Port, bs *Bitstream, opts LoadOptions) (Result, error) {
	start := time.Now()
	if p == nil || card == nil || port == nil || bs == nil {
		return Result{}, fmt.Errorf("load: programmer, card, port and bitstream are all required")
	}
	res := Result{Programmer: backendName(p, card), Path: bs.Path, InterfaceID: bs.InterfaceID, AFUID: bs.AFUID}
	done := func(err error) (Result, error) {
		res.TotalDuration = time.Since(start)
		return res, err
	}
	logger := klog.FromContext(ctx).WithValues("device", port.DeviceName(), "bitstream", bs.Path, "programmer", res.Programmer)

	if err := formatFits(bs, card, port); err != nil {
		return done(err)
	}
	if !card.Accepts(bs.InterfaceID) {
		return done(fmt.Errorf("%w: bitstream %s is built for interface %s, but card %s (port %s) has %s: build the AFU for this card's FIM/interface or pick a card with interface %s",
			ErrInterfaceMismatch, bs.Path, bs.InterfaceID, card.PCIAddress, port.DeviceName(), InterfacesOf(card.Interfaces()), bs.InterfaceID))
	}

	payload, sum, size, err := bs.readPayload(opts.SHA256)
	res.ReadDuration = time.Since(start)
	res.SHA256, res.FileBytes, res.PayloadBytes = sum, size, int64(len(payload))
	if err != nil {
		return done(err)
	}

	logger.V(2).Info("Programming port", "afuID", bs.AFUID, "bytes", len(payload))
	t := time.Now()
	err = p.Program(ctx, card, port, payload)
	res.ProgramDuration = time.Since(t)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopped by the caller (a release, a stopping daemon): says
		// nothing of the device, and the region's content is unknown.
		return done(fmt.Errorf("programming port %s with bitstream %s was stopped part way (%s backend: %v); the region's content is unknown: %w", port.DeviceName(), bs.Path, res.Programmer, err, context.Cause(ctx)))
	case err != nil:
		if errors.Is(err, ErrProgramFailed) || errors.Is(err, ErrDevicesChanged) {
			return done(fmt.Errorf("%s backend, bitstream %s, port %s: %w", res.Programmer, bs.Path, port.DeviceName(), err))
		}
		return done(fmt.Errorf("%w: %s backend, bitstream %s, port %s: %w", ErrProgramFailed, res.Programmer, bs.Path, port.DeviceName(), err))
	}

	t = time.Now()
	err = verifyAFU(ctx, card, port, bs, opts)
	res.VerifyDuration = time.Since(t)
	if err != nil {
		return done(err)
	}
	res, err = done(nil)
	logger.V(2).Info("Programmed port", "afuID", bs.AFUID, "sha256", sum,
		"read", res.ReadDuration, "program", res.ProgramDuration, "verify", res.VerifyDuration, "total", res.TotalDuration)
	return res, err
}

// InterfacesOf describes the interface IDs a region accepts (see
// discovery.Card.Interfaces), for messages: `interface "<id>"`, `interfaces
// <id>, <id>`, or `no usable interface ID`.
func InterfacesOf(ids []string) string {
	switch len(ids) {
	case 0:
		return "no usable interface ID"
	case 1:
		return fmt.Sprintf("interface %q", ids[0])
	}
	return "interfaces " + strings.Join(ids, ", ")
}

// verifyAFU reads the port's AFU ID attribute until it stops reporting
// EBUSY (afu_id) or being empty (xclbinuuid), for at most
// opts.VerifyTimeout, and compares it with the bitstream's AFU ID. Polling is
// how the kernel interfaces work: neither attribute has a change event. Each
// read is bounded by ctx and opts.ReadTimeout (discovery.ReadBounded): one
// that outlasts them ends the verification with ErrVerifyFailed.
func verifyAFU(ctx context.Context, card *discovery.Card, port *discovery.Port, bs *Bitstream, opts LoadOptions) error {
	read, what := opts.readAFUID, "AFU"
	if lr, ok := FamilyOf(card.Driver).(LoadedReader); ok {
		what = lr.LoadedKind()
		if read == nil {
			read = func(p *discovery.Port) (string, error) { return lr.ReadLoaded(p, bs.AFUID) }
		}
	}
	if read == nil {
		read = (*discovery.Port).ReadAFUID
	}
	timeout := opts.VerifyTimeout
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	interval := opts.VerifyInterval
	if interval <= 0 {
		interval = DefaultVerifyInterval
	}
	readTimeout := opts.ReadTimeout
	if readTimeout <= 0 {
		readTimeout = discovery.DefaultReadTimeout
	}
	path := port.AFUIDPath()
	attr := filepath.Base(path)
	deadline := time.Now().Add(timeout)
	for {
		id, err := discovery.ReadBounded(ctx, path, readTimeout, func() (string, error) { return read(port) })
		switch {
		case errors.Is(err, discovery.ErrReadTimedOut):
			return fmt.Errorf("%w: read of %s of port %s timed out after %s: what the region holds after programming %s is unknown: %w",
				ErrVerifyFailed, attr, port.DeviceName(), readTimeout, bs.Path, err)
		case err != nil && ctx.Err() != nil:
			return stoppedVerifying(ctx, port, attr, bs)
		}
		if err == nil {
			if id != bs.AFUID {
				return fmt.Errorf("%w: port %s reports %s %s after programming %s, want %s: the bitstream's payload does not match its metadata, or the programming did not take effect",
					ErrVerifyFailed, port.DeviceName(), what, id, bs.Path, bs.AFUID)
			}
			return nil
		}
		notLoaded := errors.Is(err, ErrNotLoaded)
		if !notLoaded && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%w: port %s after programming: %w", ErrVerifyFailed, port.DeviceName(), err)
		}
		wait := time.Until(deadline)
		switch {
		case wait <= 0 && notLoaded:
			return fmt.Errorf("%w: %s of port %s still empty %s after programming %s: the programmer reported success but no xclbin is loaded: %w",
				ErrVerifyFailed, attr, port.DeviceName(), timeout, bs.Path, err)
		case wait <= 0:
			return fmt.Errorf("%w: afu_id of port %s still busy %s after programming (the port stayed disabled): %w", ErrVerifyFailed, port.DeviceName(), timeout, err)
		}
		timer := time.NewTimer(min(wait, interval))
		select {
		case <-ctx.Done():
			timer.Stop()
			return stoppedVerifying(ctx, port, attr, bs)
		case <-timer.C:
		}
	}
}

// stoppedVerifying is the error of a read-back that ctx stopped: it says
// nothing of the device (no ErrVerifyFailed) and wraps ctx's cause.
func stoppedVerifying(ctx context.Context, port *discovery.Port, attr string, bs *Bitstream) error {
	return fmt.Errorf("port %s: gave up reading %s back after programming %s, stopped by the caller; what the region holds is unknown: %w", port.DeviceName(), attr, bs.Path, context.Cause(ctx))
}
