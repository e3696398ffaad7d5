package program

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// xclbin (axlf) layout, little-endian: the fixed struct axlf (magic,
// signature length, key block, then the 152-byte axlf_header at 304), then
// m_numSections section headers of 40 bytes, then the sections' data, each
// 8-byte aligned. m_header.m_length is the size of the whole file, including
// a signature appended at its end.
const (
	xclbinMagic = "xclbin2\x00"
	// xclbinFileMagic identifies the format; the version byte after it is
	// checked by parseXclbin, so that an older xclbin gets a clear error.
	xclbinFileMagic = "xclbin"

	xclbinOffSignatureLen = 8
	xclbinOffReserved     = 12 // 28 bytes, then the 256-byte key block
	xclbinOffUniqueID     = 296
	xclbinOffLength       = 304 // m_header
	xclbinOffTimestamp    = 312
	xclbinOffVersionPatch = 328
	xclbinOffVersionMajor = 330
	xclbinOffVersionMinor = 331
	xclbinOffMode         = 332
	xclbinOffInterface    = 336
	xclbinOffPlatform     = 352
	xclbinPlatformLen     = 64
	xclbinOffUUID         = 416
	xclbinOffNumSections  = 448
	// xclbinHeaderLen is struct axlf without its section headers.
	xclbinHeaderLen = 456

	xclbinSectionLen     = 40
	xclbinSectionNameLen = 16
	xclbinSecOffName     = 4
	xclbinSecOffOffset   = 24
	xclbinSecOffSize     = 32
	// xclbinMaxSections is the most section headers XRT accepts.
	xclbinMaxSections = 0x10000
	xclbinAlign       = 8
)

// XclbinMode is an xclbin's m_mode: what kind of image it is.
type XclbinMode uint16

// The modes XRT defines. The emulation modes cannot be loaded on a card.
const (
	XclbinFlat               XclbinMode = 0
	XclbinPR                 XclbinMode = 1
	XclbinTandemStage2       XclbinMode = 2
	XclbinTandemStage2WithPR XclbinMode = 3
	XclbinHWEmu              XclbinMode = 4
	XclbinSWEmu              XclbinMode = 5
	XclbinHWEmuPR            XclbinMode = 6
)

var xclbinModeNames = [...]string{"flat", "pr", "tandem-stage2", "tandem-stage2-with-pr", "hw-emu", "sw-emu", "hw-emu-pr"}

func (m XclbinMode) String() string {
	if int(m) < len(xclbinModeNames) {
		return xclbinModeNames[m]
	}
	return "mode " + strconv.Itoa(int(m))
}

func (m XclbinMode) emulation() bool {
	return m == XclbinHWEmu || m == XclbinSWEmu || m == XclbinHWEmuPR
}

// XclbinSectionKind is an xclbin section header's m_sectionKind.
type XclbinSectionKind uint32

// The section kinds this package names. A loadable xclbin carries its
// configuration image in a BITSTREAM section (UltraScale+ cards) or a PDI or
// partial PDI section (Versal cards).
const (
	XclbinBitstream         XclbinSectionKind = 0
	XclbinClearingBitstream XclbinSectionKind = 1
	XclbinEmbeddedMetadata  XclbinSectionKind = 2
	XclbinMemTopology       XclbinSectionKind = 6
	XclbinIPLayout          XclbinSectionKind = 8
	XclbinBuildMetadata     XclbinSectionKind = 14
	XclbinPDI               XclbinSectionKind = 18
	XclbinPartialPDI        XclbinSectionKind = 19
)

func (k XclbinSectionKind) String() string {
	switch k {
	case XclbinBitstream:
		return "BITSTREAM"
	case XclbinClearingBitstream:
		return "CLEARING_BITSTREAM"
	case XclbinEmbeddedMetadata:
		return "EMBEDDED_METADATA"
	case XclbinMemTopology:
		return "MEM_TOPOLOGY"
	case XclbinIPLayout:
		return "IP_LAYOUT"
	case XclbinBuildMetadata:
		return "BUILD_METADATA"
	case XclbinPDI:
		return "PDI"
	case XclbinPartialPDI:
		return "BITSTREAM_PARTIAL_PDI"
	}
	return "kind " + strconv.FormatUint(uint64(k), 10)
}

// configImage reports whether a section of kind k configures the FPGA.
func (k XclbinSectionKind) configImage() bool {
	return k == XclbinBitstream || k == XclbinPDI || k == XclbinPartialPDI
}

// XclbinInfo is what an xclbin's header says beyond its IDs and platform.
type XclbinInfo struct {
	Mode XclbinMode
	// Version is the version of the tools that built the file
	// ("major.minor.patch").
	Version string
	// Timestamp is m_timeStamp: seconds since the epoch at build time.
	Timestamp uint64
	// Signed is true when a signature is appended to the file.
	Signed bool
	// Sections is how many section headers the file has.
	Sections int
	// ImageKind is the kind of the first section carrying a configuration
	// image (BITSTREAM, PDI or BITSTREAM_PARTIAL_PDI); ImageBytes the total
	// size of the sections of that kind.
	ImageKind  XclbinSectionKind
	ImageBytes uint64
}

// xclbinHeader is what parseXclbin learns from an xclbin.
type xclbinHeader struct {
	info        XclbinInfo
	interfaceID string
	uuid        string
	platform    string
}

// parseXclbin checks the xclbin in the first size bytes of r: magic,
// m_length equal to size, signature, header and section table within the
// file, every section within the file and after the table, a loadable mode,
// a configuration image, usable interface and xclbin UUIDs and a printable
// NUL-terminated platform name. name prefixes every error. It reads the
// header and the section table only.
func parseXclbin(name string, r io.ReaderAt, size int64) (xclbinHeader, error) {
	var h xclbinHeader
	var hdr [xclbinHeaderLen]byte
	want := int(min(size, xclbinHeaderLen))
	if n, err := r.ReadAt(hdr[:want], 0); n < want {
		return h, fmt.Errorf("%s: %w: read %d of its first %d bytes: %w", name, ErrBitstreamChanged, n, want, err)
	}
	n := want
	if n < len(xclbinMagic) || string(hdr[:len(xclbinMagic)]) != xclbinMagic {
		got := hdr[:min(n, len(xclbinMagic))]
		if bytes.Equal(got, []byte(xclbinMagic[:len(got)])) {
			return h, invalidf("%s: is %d bytes, shorter than the %d-byte xclbin header: the file is truncated", name, size, xclbinHeaderLen)
		}
		return h, invalidf("%s: xclbin magic is %q, want %q: only xclbin2 (axlf) files can be loaded; rebuild it with current Vitis tools", name, got, xclbinMagic)
	}
	if size < xclbinHeaderLen || n < xclbinHeaderLen {
		return h, invalidf("%s: is %d bytes, shorter than the %d-byte xclbin header: the file is truncated", name, size, xclbinHeaderLen)
	}
	le := binary.LittleEndian
	if length := le.Uint64(hdr[xclbinOffLength:]); length != uint64(size) {
		return h, invalidf("%s: xclbin header m_length is %d but the file is %d bytes: the file is truncated or has trailing data; copy it again", name, length, size)
	}
	numSections := le.Uint32(hdr[xclbinOffNumSections:])
	if numSections > xclbinMaxSections {
		return h, invalidf("%s: xclbin header m_numSections is %d, more than the %d XRT accepts: the file is corrupt", name, numSections, xclbinMaxSections)
	}
	tableEnd := int64(xclbinHeaderLen) + int64(numSections)*xclbinSectionLen
	if tableEnd > size {
		return h, invalidf("%s: xclbin section table of %d headers ends at byte %d but the file ends at %d: the file is truncated or corrupt", name, numSections, tableEnd, size)
	}
	sig := int32(le.Uint32(hdr[xclbinOffSignatureLen:]))
	if sig < -1 || int64(sig) > size-tableEnd {
		return h, invalidf("%s: xclbin signature length %d is outside -1..%d (the bytes after the section table): the file is corrupt", name, sig, size-tableEnd)
	}
	mode := XclbinMode(le.Uint16(hdr[xclbinOffMode:]))
	switch {
	case mode.emulation():
		return h, invalidf("%s: xclbin m_mode is %s: it is built for emulation, not for a card; build it for hardware (v++ --target hw)", name, mode)
	case int(mode) >= len(xclbinModeNames):
		return h, invalidf("%s: xclbin m_mode is %d, which XRT does not define: the file is corrupt", name, uint16(mode))
	}
	var err error
	if h.interfaceID, err = xclbinUUID(name, "interface UUID", hdr[xclbinOffInterface:xclbinOffInterface+16],
		"build it for a platform with a partial-reconfiguration shell, whose interface UUID the card reports"); err != nil {
		return h, err
	}
	if h.uuid, err = xclbinUUID(name, "xclbin UUID", hdr[xclbinOffUUID:xclbinOffUUID+16],
		"rebuild it with current Vitis tools (v++ --link) or give it one with xclbinutil"); err != nil {
		return h, err
	}
	if h.platform, err = xclbinPlatform(name, hdr[xclbinOffPlatform:xclbinOffPlatform+xclbinPlatformLen]); err != nil {
		return h, err
	}
	h.info = XclbinInfo{
		Mode:      mode,
		Version:   fmt.Sprintf("%d.%d.%d", hdr[xclbinOffVersionMajor], hdr[xclbinOffVersionMinor], le.Uint16(hdr[xclbinOffVersionPatch:])),
		Timestamp: le.Uint64(hdr[xclbinOffTimestamp:]),
		Signed:    sig >= 0,
		Sections:  int(numSections),
	}
	if err := h.readSections(name, r, size, tableEnd); err != nil {
		return h, err
	}
	return h, nil
}

// readSections checks the section table, which ends at tableEnd, and finds
// the configuration image.
func (h *xclbinHeader) readSections(name string, r io.ReaderAt, size, tableEnd int64) error {
	table := make([]byte, tableEnd-xclbinHeaderLen)
	if n, err := r.ReadAt(table, xclbinHeaderLen); n < len(table) {
		return fmt.Errorf("%s: %w: read %d of the %d bytes of its section table: %w", name, ErrBitstreamChanged, n, len(table), err)
	}
	image := false
	for i := 0; i < h.info.Sections; i++ {
		s := table[i*xclbinSectionLen : (i+1)*xclbinSectionLen]
		kind := XclbinSectionKind(binary.LittleEndian.Uint32(s))
		off := binary.LittleEndian.Uint64(s[xclbinSecOffOffset:])
		n := binary.LittleEndian.Uint64(s[xclbinSecOffSize:])
		if n == 0 {
			continue
		}
		if off < uint64(tableEnd) || off > uint64(size) || n > uint64(size)-off {
			return invalidf("%s: xclbin section %d (%s, %q) claims bytes %d..%d, outside the data area %d..%d of the file: the file is truncated or corrupt",
				name, i, kind, sectionName(s), off, off+n, tableEnd, size)
		}
		if !kind.configImage() {
			continue
		}
		if !image {
			h.info.ImageKind, image = kind, true
		}
		if kind == h.info.ImageKind {
			h.info.ImageBytes += n
		}
	}
	if !image {
		return invalidf("%s: xclbin has no BITSTREAM, PDI or BITSTREAM_PARTIAL_PDI section among its %d sections: it holds metadata only and would program nothing; link it with v++ for hardware", name, h.info.Sections)
	}
	return nil
}

// sectionName is the NUL-terminated name of a section header, quoted as is.
func sectionName(s []byte) string {
	b := s[xclbinSecOffName : xclbinSecOffName+xclbinSectionNameLen]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// xclbinUUID returns the canonical form of a 16-byte UUID field, refusing
// the all-zero and all-f values of an unset field.
func xclbinUUID(name, field string, b []byte, fix string) (string, error) {
	id := hex.EncodeToString(b)
	switch id {
	case allZeroID:
		return "", invalidf("%s: xclbin %s is %s (all zero), the value of an unset field: %s", name, field, dashedUUID(id), fix)
	case discovery.AllF:
		return "", invalidf("%s: xclbin %s is %s (all f), the value of an unset field: %s", name, field, dashedUUID(id), fix)
	}
	return id, nil
}

const allZeroID = "00000000000000000000000000000000"

// xclbinPlatform returns the NUL-terminated, printable platform VBNV.
func xclbinPlatform(name string, b []byte) (string, error) {
	end := bytes.IndexByte(b, 0)
	if end < 0 {
		return "", invalidf("%s: xclbin platform VBNV fills all %d bytes without a terminating NUL: the file is corrupt", name, len(b))
	}
	for _, c := range b[:end] {
		if c < 0x20 || c > 0x7e {
			return "", invalidf("%s: xclbin platform VBNV %q has a non-printable byte 0x%02x: the file is corrupt", name, b[:end], c)
		}
	}
	return string(b[:end]), nil
}

// XclbinMetadata describes an xclbin for WriteXclbin.
type XclbinMetadata struct {
	// InterfaceID is the interface UUID of the shell the xclbin is built
	// for; XclbinUUID identifies the xclbin. 32 hex digits, dashed or not.
	InterfaceID string
	XclbinUUID  string
	// Platform is the platform VBNV, at most 63 printable characters
	// ("xilinx_u250_gen3x16_xdma_shell_4_1").
	Platform string
	Mode     XclbinMode
	// ImageKind is the kind of the section holding the payload:
	// XclbinBitstream (the zero value), XclbinPDI or XclbinPartialPDI.
	ImageKind XclbinSectionKind
	Timestamp uint64
	// Sections are written after the image section, in order.
	Sections []XclbinSection
	// Signature, when not empty, is appended as a signed xclbin's is.
	Signature []byte
}

// XclbinSection is one section WriteXclbin writes: its kind, its name (at
// most 15 bytes) and its data.
type XclbinSection struct {
	Kind XclbinSectionKind
	Name string
	Data []byte
}

// WriteXclbin writes to w an xclbin (axlf) file: the header for m, a section
// of kind m.ImageKind named "bitstream" holding payload, then m.Sections,
// each 8-byte aligned, then m.Signature. It refuses what Open would refuse
// (malformed, all-zero or all-f UUIDs, a platform name that is too long or
// not printable, an emulation mode, an empty payload), so whatever it
// writes can be opened and loaded.
func WriteXclbin(w io.Writer, m XclbinMetadata, payload []byte) error {
	data, err := buildXclbin(m, payload)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("write xclbin: %w", err)
	}
	return nil
}

// buildXclbin lays out the file WriteXclbin writes and checks it with
// parseXclbin.
func buildXclbin(m XclbinMetadata, payload []byte) ([]byte, error) {
	ifID, err := discovery.CanonicalID(m.InterfaceID)
	if err != nil {
		return nil, fmt.Errorf("xclbin metadata InterfaceID: %w: give the interface UUID of the card's shell", err)
	}
	uuid, err := discovery.CanonicalID(m.XclbinUUID)
	if err != nil {
		return nil, fmt.Errorf("xclbin metadata XclbinUUID: %w: give the xclbin's UUID", err)
	}
	if len(m.Platform) >= xclbinPlatformLen {
		return nil, fmt.Errorf("xclbin metadata Platform %q is %d bytes, more than the %d the format holds: shorten it", m.Platform, len(m.Platform), xclbinPlatformLen-1)
	}
	if !m.ImageKind.configImage() {
		return nil, fmt.Errorf("xclbin metadata ImageKind %s is not a configuration image: use BITSTREAM, PDI or BITSTREAM_PARTIAL_PDI", m.ImageKind)
	}
	if len(payload) == 0 {
		return nil, fmt.Errorf("xclbin payload is empty: pass the configuration image to load")
	}
	sections := append([]XclbinSection{{Kind: m.ImageKind, Name: "bitstream", Data: payload}}, m.Sections...)
	if len(sections) > xclbinMaxSections {
		return nil, fmt.Errorf("xclbin metadata has %d sections, more than the %d XRT accepts: merge some", len(sections), xclbinMaxSections)
	}
	for _, s := range sections {
		if len(s.Name) >= xclbinSectionNameLen {
			return nil, fmt.Errorf("xclbin section name %q is %d bytes, more than the %d the format holds: shorten it", s.Name, len(s.Name), xclbinSectionNameLen-1)
		}
	}
	tableEnd := xclbinHeaderLen + len(sections)*xclbinSectionLen
	size := align8(tableEnd)
	for _, s := range sections {
		size = align8(size + len(s.Data))
	}
	size += len(m.Signature)
	b := make([]byte, size)
	le := binary.LittleEndian
	copy(b, xclbinMagic)
	sig := int32(-1)
	if len(m.Signature) > 0 {
		sig = int32(len(m.Signature))
	}
	le.PutUint32(b[xclbinOffSignatureLen:], uint32(sig))
	// xclbinutil leaves the reserved bytes and the unused key block 0xff.
	for i := xclbinOffReserved; i < xclbinOffUniqueID; i++ {
		b[i] = 0xff
	}
	le.PutUint64(b[xclbinOffLength:], uint64(size))
	le.PutUint64(b[xclbinOffTimestamp:], m.Timestamp)
	b[xclbinOffVersionMajor] = 2
	le.PutUint16(b[xclbinOffMode:], uint16(m.Mode))
	_, _ = hex.Decode(b[xclbinOffInterface:xclbinOffInterface+16], []byte(ifID)) // canonical: 32 hex digits
	copy(b[xclbinOffPlatform:xclbinOffPlatform+xclbinPlatformLen-1], m.Platform)
	_, _ = hex.Decode(b[xclbinOffUUID:xclbinOffUUID+16], []byte(uuid))
	le.PutUint32(b[xclbinOffNumSections:], uint32(len(sections)))
	off := align8(tableEnd)
	for i, s := range sections {
		h := b[xclbinHeaderLen+i*xclbinSectionLen:]
		le.PutUint32(h, uint32(s.Kind))
		copy(h[xclbinSecOffName:xclbinSecOffName+xclbinSectionNameLen-1], s.Name)
		if len(s.Data) > 0 {
			le.PutUint64(h[xclbinSecOffOffset:], uint64(off))
			le.PutUint64(h[xclbinSecOffSize:], uint64(len(s.Data)))
			copy(b[off:], s.Data)
		}
		off = align8(off + len(s.Data))
	}
	copy(b[off:], m.Signature)
	if _, err := parseXclbin("xclbin", bytes.NewReader(b), int64(len(b))); err != nil {
		return nil, err
	}
	return b, nil
}

func align8(n int) int { return (n + xclbinAlign - 1) &^ (xclbinAlign - 1) }
