package program

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Format is a bitstream file format, told apart by content, not by name.
type Format string

const (
	// FormatGBS is the Intel PAC green bitstream: header, JSON metadata,
	// raw bitstream.
	FormatGBS Format = "gbs"
	// FormatAOCX is the OpenCL AOCX: an ELF file carrying a gzipped GBS.
	FormatAOCX Format = "aocx"
	// FormatXclbin is the AMD/Xilinx xclbin (axlf) of Alveo cards: a header
	// and sections, loaded whole through XRT.
	FormatXclbin Format = "xclbin"
)

// Size limits applied unless an OpenOption changes them.
const (
	// DefaultMaxFileSize caps the size of a bitstream file.
	DefaultMaxFileSize int64 = 512 << 20
	// DefaultMaxDecompressedSize caps the GBS decompressed from an AOCX, so
	// a gzip bomb cannot exhaust memory.
	DefaultMaxDecompressedSize int64 = 512 << 20
)

// hashChunk is how much ReadPayload reads before hashing: small enough that
// the hash reads the bytes while they are still in the CPU cache.
const hashChunk = 1 << 20

// Bitstream is a bitstream file whose headers have been parsed. Values
// returned by Open and by a Repository are read-only: they may be shared
// between goroutines.
type Bitstream struct {
	// Path is the file that ReadPayload reads.
	Path string
	// Name is the path relative to the Repository the bitstream was found
	// in; empty when it came from Open.
	Name   string
	Format Format
	// InterfaceID and AFUID are canonical (32 lowercase hex). InterfaceID
	// is the interface (FIM, shell) the bitstream is built for: a GBS's
	// interface-uuid, an xclbin's interface UUID. AFUID is what the port
	// reports once the bitstream is loaded: a GBS's accelerator-type-uuid,
	// an xclbin's UUID.
	InterfaceID string
	AFUID       string
	// Platform is the platform the header names: an xclbin's platform VBNV,
	// a GBS's platform-name (often empty).
	Platform string
	// Size is the size of the file.
	Size int64
	// PayloadSize is the size of what is handed to the programmer, before
	// padding: the raw bitstream after a GBS header (for AOCX: inside the
	// decompressed GBS), the whole file for an xclbin.
	PayloadSize int64
	// SHA256 is the hex digest of the whole file when it was opened with
	// WithDigest; empty otherwise (a Repository indexes headers only).
	// Load reports the digest of what it loaded in Result.SHA256.
	SHA256 string
	// Metadata is the GBS metadata (for AOCX, of the GBS inside it); zero
	// for an xclbin.
	Metadata GBSMetadata
	// Xclbin is what an xclbin's header says; zero for other formats.
	Xclbin  XclbinInfo
	ModTime time.Time

	limits limits
	// repoDir, set for a Repository's bitstream, is the repository's
	// directory as configured: ReadPayload reads only a file below where
	// it resolves at the time of the read, however Path resolves by then
	// (a symlink swapped in after the lookup). Resolved at each read, not
	// at indexing: the directory may have moved since (its symlink
	// re-pointed) with every file's fingerprint unchanged.
	repoDir string
}

// limits bounds what parsing may read and allocate.
type limits struct {
	maxFile         int64
	maxDecompressed int64
}

func (l limits) withDefaults() limits {
	if l.maxFile <= 0 {
		l.maxFile = DefaultMaxFileSize
	}
	if l.maxDecompressed <= 0 {
		l.maxDecompressed = DefaultMaxDecompressedSize
	}
	return l
}

type openConfig struct {
	limits limits
	digest bool
}

// OpenOption changes how Open reads a bitstream.
type OpenOption func(*openConfig)

// WithMaxFileSize refuses files larger than n bytes (DefaultMaxFileSize when
// n <= 0). The limit also applies to the Bitstream's ReadPayload.
func WithMaxFileSize(n int64) OpenOption {
	return func(c *openConfig) { c.limits.maxFile = n }
}

// WithMaxDecompressedSize refuses an AOCX whose GBS decompresses to more than
// n bytes (DefaultMaxDecompressedSize when n <= 0). The limit also applies to
// the Bitstream's ReadPayload.
func WithMaxDecompressedSize(n int64) OpenOption {
	return func(c *openConfig) { c.limits.maxDecompressed = n }
}

// WithDigest makes Open read the whole file and set Bitstream.SHA256.
func WithDigest() OpenOption {
	return func(c *openConfig) { c.digest = true }
}

// Open parses the bitstream at path, GBS, AOCX or xclbin by content. It
// reads the GBS header only, for an AOCX the ELF sections and the
// decompressed GBS (streamed, not kept), for an xclbin its header and
// section table, unless WithDigest asks for the whole file to be hashed.
// Errors for bad content match ErrInvalidBitstream.
func Open(path string, opts ...OpenOption) (*Bitstream, error) {
	var cfg openConfig
	for _, o := range opts {
		o(&cfg)
	}
	cfg.limits = cfg.limits.withDefaults()
	f, fi, err := openRegular(path, cfg.limits.maxFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := parseFile(path, f, fi.Size(), cfg.limits)
	if err != nil {
		return nil, err
	}
	b := &Bitstream{
		Path:        path,
		Format:      p.format,
		InterfaceID: p.interfaceID,
		AFUID:       p.afuID,
		Platform:    p.platform,
		Size:        fi.Size(),
		PayloadSize: p.payloadSize,
		Metadata:    p.meta,
		Xclbin:      p.xclbin,
		ModTime:     fi.ModTime(),
		limits:      cfg.limits,
	}
	if cfg.digest {
		h := sha256.New()
		n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, fi.Size()), make([]byte, hashChunk))
		if err != nil {
			return nil, fmt.Errorf("hash %s: %w", path, err)
		}
		if n != fi.Size() {
			return nil, fmt.Errorf("%s: %w: it shrank from %d to %d bytes while being hashed", path, ErrBitstreamChanged, fi.Size(), n)
		}
		b.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return b, nil
}

// ReadPayload reads the file once, hashing it as it reads, and returns what
// to hand to a Programmer: for a GBS or AOCX the raw bitstream, padded with
// zero bytes to a multiple of 4 (older kernels reject an unaligned
// buffer_size); for an xclbin the whole file, exactly the bytes hashed.
//
// It re-parses what it read: the format and the IDs that b carries must still
// match, else the error matches ErrBitstreamChanged. When wantSHA256 is not
// empty (64 hex digits, optionally prefixed "sha256:") the digest of the
// whole file must equal it, else the error matches ErrChecksumMismatch.
func (b *Bitstream) ReadPayload(wantSHA256 string) ([]byte, error) {
	payload, _, _, err := b.readPayload(wantSHA256)
	return payload, err
}

// readPayload is ReadPayload that also returns the file's sha256 and size
// as read, also on error when it got that far.
func (b *Bitstream) readPayload(wantSHA256 string) (payload []byte, sum string, size int64, err error) {
	want, err := canonicalSHA256(wantSHA256)
	if err != nil {
		return nil, "", 0, err
	}
	lim := b.limits.withDefaults()
	f, fi, err := openRegular(b.Path, lim.maxFile)
	if err != nil {
		return nil, "", 0, err
	}
	defer f.Close()
	if b.repoDir != "" {
		root, err := filepath.EvalSymlinks(b.repoDir)
		if err != nil {
			return nil, "", 0, fmt.Errorf("%w: repository %s cannot be resolved: %w", ErrBitstreamChanged, b.repoDir, err)
		}
		// What was opened, not what the path says now.
		real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if err != nil {
			return nil, "", 0, fmt.Errorf("%w: cannot tell which file %s opened (is /proc mounted?): %w", ErrBitstreamChanged, b.Path, err)
		}
		if !within(root, real) {
			return nil, "", 0, fmt.Errorf("%w: %s now resolves to %q, outside the repository %s: refused", ErrBitstreamChanged, b.Path, real, root)
		}
	}
	data, sum, err := readAndHash(b.Path, f, fi.Size())
	if err != nil {
		return nil, "", 0, err
	}
	size = int64(len(data))
	if want != "" && sum != want {
		return nil, sum, size, fmt.Errorf("%w: %s has sha256 %s, want %s: the file changed or the pinned digest is wrong", ErrChecksumMismatch, b.Path, sum, want)
	}
	p, err := parseBytes(b.Path, data, lim)
	if err != nil {
		return nil, sum, size, err
	}
	if err := b.sameAs(p); err != nil {
		return nil, sum, size, err
	}
	if p.format == FormatXclbin {
		return p.payload, sum, size, nil
	}
	return padTo4(p.payload), sum, size, nil
}

// sameAs checks that a fresh parse still carries the format and IDs b was
// made with; fields b leaves empty are not compared.
func (b *Bitstream) sameAs(p parsed) error {
	if (b.Format != "" && b.Format != p.format) ||
		(b.InterfaceID != "" && b.InterfaceID != p.interfaceID) ||
		(b.AFUID != "" && b.AFUID != p.afuID) {
		return fmt.Errorf("%w: %s was indexed as %s interface %s AFU %s and is now %s interface %s AFU %s: retry so the repository re-indexes it",
			ErrBitstreamChanged, b.Path, b.Format, b.InterfaceID, b.AFUID, p.format, p.interfaceID, p.afuID)
	}
	return nil
}

// parsed is what parsing a bitstream file learns.
type parsed struct {
	format      Format
	interfaceID string
	afuID       string
	platform    string
	// meta is set for GBS and AOCX, xclbin for xclbin.
	meta        GBSMetadata
	xclbin      XclbinInfo
	payloadSize int64
	// payload is what a programmer gets, unpadded; set by parseBytes only.
	payload []byte
}

// gbsParsed is what a GBS header (of a GBS file, or inside an AOCX) tells.
func gbsParsed(format Format, h gbsHeader, payloadSize int64, payload []byte) parsed {
	return parsed{format: format, interfaceID: h.interfaceID, afuID: h.afuID, platform: h.meta.PlatformName, meta: h.meta, payloadSize: payloadSize, payload: payload}
}

// xclbinParsed is what an xclbin header tells; the payload is the whole
// file.
func xclbinParsed(h xclbinHeader, size int64, data []byte) parsed {
	return parsed{format: FormatXclbin, interfaceID: h.interfaceID, afuID: h.uuid, platform: h.platform, xclbin: h.info, payloadSize: size, payload: data}
}

// parseFile parses the bitstream in the first size bytes of r, reading only
// what the format requires.
func parseFile(name string, r io.ReaderAt, size int64, lim limits) (parsed, error) {
	head := make([]byte, min(size, int64(maxGBSHeaderLen)))
	if n, err := r.ReadAt(head, 0); n < len(head) {
		return parsed{}, fmt.Errorf("%s: %w: read %d of its first %d bytes: %w", name, ErrBitstreamChanged, n, len(head), err)
	}
	format, err := detectFormat(name, head, size)
	if err != nil {
		return parsed{}, err
	}
	switch format {
	case FormatAOCX:
		return parseAOCX(name, r, size, lim, false)
	case FormatXclbin:
		h, err := parseXclbin(name, r, size)
		if err != nil {
			return parsed{}, err
		}
		return xclbinParsed(h, size, nil), nil
	}
	h, err := parseGBSHeader(name, head, size)
	if err != nil {
		return parsed{}, err
	}
	return gbsParsed(FormatGBS, h, size-h.payloadOffset, nil), nil
}

// parseBytes parses a whole bitstream file held in data and returns its
// payload too (for a GBS, a subslice of data; for an xclbin, data).
func parseBytes(name string, data []byte, lim limits) (parsed, error) {
	size := int64(len(data))
	format, err := detectFormat(name, data, size)
	if err != nil {
		return parsed{}, err
	}
	switch format {
	case FormatAOCX:
		return parseAOCX(name, bytes.NewReader(data), size, lim, true)
	case FormatXclbin:
		h, err := parseXclbin(name, bytes.NewReader(data), size)
		if err != nil {
			return parsed{}, err
		}
		return xclbinParsed(h, size, data), nil
	}
	h, err := parseGBSHeader(name, data, size)
	if err != nil {
		return parsed{}, err
	}
	return gbsParsed(FormatGBS, h, size-h.payloadOffset, data[h.payloadOffset:]), nil
}

const elfMagic = "\x7fELF"

// detectFormat tells GBS, AOCX and xclbin apart by the first bytes of a file
// of the given size. A file shorter than a magic but matching its start is
// taken to be a truncated file of that format.
func detectFormat(name string, head []byte, size int64) (Format, error) {
	if size == 0 {
		return "", invalidf("%s: is empty: not a bitstream", name)
	}
	matches := func(magic string) bool {
		n := min(len(head), len(magic))
		return n > 0 && string(head[:n]) == magic[:n]
	}
	switch {
	case matches(gbsFileMagic):
		return FormatGBS, nil
	case matches(elfMagic):
		return FormatAOCX, nil
	case matches(xclbinFileMagic):
		return FormatXclbin, nil
	}
	return "", &notBitstreamError{invalidError{fmt.Errorf("%s: starts with %q, neither the GBS magic %q, the ELF magic of an AOCX nor the xclbin magic %q: not a bitstream",
		name, head[:min(len(head), len(gbsFileMagic))], gbsFileMagic, xclbinMagic)}}
}

// openRegular opens path for reading and checks that it is a regular file of
// at most maxSize bytes, before and after opening it. It opens non-blocking
// so that a FIFO swapped in between cannot hang the caller.
func openRegular(path string, maxSize int64) (*os.File, os.FileInfo, error) {
	// Refuse what is known not to be a regular file without opening it:
	// opening a device can have side effects.
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, invalidf("%s: is not a regular file (mode %s): a bitstream must be a regular file", path, fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open bitstream: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat bitstream: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, invalidf("%s: is not a regular file (mode %s): a bitstream must be a regular file", path, fi.Mode())
	}
	if fi.Size() > maxSize {
		f.Close()
		return nil, nil, invalidf("%s: is %d bytes, more than the %d-byte limit: raise the bitstream size limit if the file is genuine", path, fi.Size(), maxSize)
	}
	return f, fi, nil
}

// readAndHash reads the size bytes of f into one buffer, with 3 spare bytes
// of capacity for padding, and hashes each chunk right after reading it.
// It fails if the file is shorter or longer than size.
func readAndHash(name string, f *os.File, size int64) ([]byte, string, error) {
	buf := make([]byte, size, size+3)
	h := sha256.New()
	for off := int64(0); off < size; {
		n, err := f.Read(buf[off:min(off+hashChunk, size)])
		h.Write(buf[off : off+int64(n)])
		off += int64(n)
		if errors.Is(err, io.EOF) {
			if off < size {
				return nil, "", fmt.Errorf("%s: %w: it shrank from %d to %d bytes while being read: retry once it is fully written", name, ErrBitstreamChanged, size, off)
			}
			break
		}
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", name, err)
		}
	}
	var probe [1]byte
	if n, _ := f.Read(probe[:]); n > 0 {
		return nil, "", fmt.Errorf("%s: %w: it grew beyond %d bytes while being read: retry once it is fully written", name, ErrBitstreamChanged, size)
	}
	return buf, hex.EncodeToString(h.Sum(nil)), nil
}

// padTo4 extends b with zero bytes to a multiple of 4, in place when its
// capacity allows.
func padTo4(b []byte) []byte {
	n := (len(b) + 3) &^ 3
	if n == len(b) {
		return b
	}
	if n > cap(b) {
		nb := make([]byte, n)
		copy(nb, b)
		return nb
	}
	l := len(b)
	b = b[:n]
	clear(b[l:])
	return b
}

// canonicalSHA256 accepts a hex sha256 digest, optionally prefixed
// "sha256:", in any case; "" stays "".
func canonicalSHA256(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	d := strings.ToLower(strings.TrimPrefix(strings.TrimSpace(s), "sha256:"))
	if _, err := hex.DecodeString(d); err != nil || len(d) != 2*sha256.Size {
		return "", fmt.Errorf("sha256 pin %q is not 64 hex digits: give the output of sha256sum for the bitstream file", s)
	}
	return d, nil
}
