package program

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// AOCX layout: an ELF file whose section aocxBinSection is a nested ELF file
// whose section aocxGBSSection is a gzipped GBS.
const (
	aocxBinSection = ".acl.fpga.bin"
	aocxGBSSection = ".acl.gbs.gz"
	// sizeHintRatio caps the buffer preallocated from a gzip trailer's size
	// claim at this multiple of the compressed size, so that a lying trailer
	// cannot make a small file allocate much; a genuine file that compresses
	// better only makes the buffer grow while decompressing.
	sizeHintRatio = 64
)

// WriteAOCX writes to w a minimal AOCX file holding gbs: an ELF64 file with a
// section header string table and an .acl.fpga.bin section, itself an ELF64
// file whose .acl.gbs.gz section is gbs, gzipped. It refuses a gbs that does
// not parse as a GBS file.
func WriteAOCX(w io.Writer, gbs []byte) error {
	if _, err := parseGBSHeader("GBS", gbs, int64(len(gbs))); err != nil {
		return fmt.Errorf("AOCX content: %w", err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(gbs); err != nil {
		return fmt.Errorf("compress GBS: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress GBS: %w", err)
	}
	var inner bytes.Buffer
	if err := writeELF(&inner, aocxGBSSection, gz.Bytes()); err != nil {
		return err
	}
	return writeELF(w, aocxBinSection, inner.Bytes())
}

// writeELF writes a little-endian ELF64 relocatable file with one
// SHT_PROGBITS section holding data and a section header string table:
// header, data, string table, section headers (8-byte aligned).
func writeELF(w io.Writer, section string, data []byte) error {
	const (
		ehsize = 64
		shsize = 64
	)
	strtab := "\x00" + section + "\x00.shstrtab\x00"
	dataOff := uint64(ehsize)
	strOff := dataOff + uint64(len(data))
	shOff := (strOff + uint64(len(strtab)) + 7) &^ 7
	hdr := elf.Header64{
		Type:      uint16(elf.ET_REL),
		Machine:   uint16(elf.EM_NONE),
		Version:   uint32(elf.EV_CURRENT),
		Shoff:     shOff,
		Ehsize:    ehsize,
		Shentsize: shsize,
		Shnum:     3,
		Shstrndx:  2,
	}
	copy(hdr.Ident[:], elfMagic)
	hdr.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	hdr.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	hdr.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	sections := [3]elf.Section64{
		{}, // SHN_UNDEF
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: dataOff, Size: uint64(len(data)), Addralign: 1},
		{Name: uint32(len(section) + 2), Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(strtab)), Addralign: 1},
	}
	var buf bytes.Buffer
	buf.Grow(int(shOff) + len(sections)*shsize)
	if err := binary.Write(&buf, binary.LittleEndian, &hdr); err != nil {
		return fmt.Errorf("encode ELF header: %w", err)
	}
	buf.Write(data)
	buf.WriteString(strtab)
	buf.Write(make([]byte, int(shOff)-buf.Len()))
	if err := binary.Write(&buf, binary.LittleEndian, &sections); err != nil {
		return fmt.Errorf("encode ELF section headers: %w", err)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("write ELF file: %w", err)
	}
	return nil
}

// parseAOCX parses the AOCX file in the first size bytes of r: the outer
// ELF, the nested ELF in .acl.fpga.bin and the GBS gzipped in .acl.gbs.gz,
// decompressing at most lim.maxDecompressed bytes. With keep it returns the
// payload too; without, it streams the GBS and keeps only its header.
func parseAOCX(name string, r io.ReaderAt, size int64, lim limits, keep bool) (parsed, error) {
	outer, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return parsed{}, invalidf("%s: not a readable ELF file: %w: an AOCX bitstream is an ELF file; this one is truncated or corrupt", name, err)
	}
	bin, err := elfSection(name, outer, size, aocxBinSection, "the file is an ELF file but not an AOCX bitstream")
	if err != nil {
		return parsed{}, err
	}
	binName := name + ": " + aocxBinSection
	inner, err := elf.NewFile(bin)
	if err != nil {
		return parsed{}, invalidf("%s: not a readable ELF file: %w: the AOCX is truncated or corrupt", binName, err)
	}
	gz, err := elfSection(binName, inner, bin.Size(), aocxGBSSection, "the AOCX holds no partial-reconfiguration image (built for a board without PR?): build it for a PR-capable board")
	if err != nil {
		return parsed{}, err
	}
	gbsName := binName + ": " + aocxGBSSection
	zr, err := gzip.NewReader(gz)
	if err != nil {
		return parsed{}, invalidf("%s: not gzip data: %w: the AOCX is corrupt", gbsName, err)
	}
	maxSize := lim.maxDecompressed
	bomb := func() error {
		return invalidf("%s: decompresses to more than %d bytes, the limit: the AOCX is corrupt or a decompression bomb; raise the decompressed size limit if it is genuine", gbsName, maxSize)
	}
	if keep {
		data, err := readLimited(zr, maxSize, gzipSizeHint(gz, maxSize))
		if errors.Is(err, errTooLarge) {
			return parsed{}, bomb()
		}
		if err != nil {
			return parsed{}, invalidf("%s: decompress: %w: the AOCX is corrupt", gbsName, err)
		}
		h, err := parseGBSHeader(gbsName, data, int64(len(data)))
		if err != nil {
			return parsed{}, err
		}
		return gbsParsed(FormatAOCX, h, int64(len(data))-h.payloadOffset, data[h.payloadOffset:]), nil
	}
	lr := io.LimitReader(zr, maxSize+1)
	head := make([]byte, maxGBSHeaderLen)
	n, err := io.ReadFull(lr, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return parsed{}, invalidf("%s: decompress: %w: the AOCX is corrupt", gbsName, err)
	}
	rest, err := io.Copy(io.Discard, lr)
	if err != nil {
		return parsed{}, invalidf("%s: decompress: %w: the AOCX is corrupt", gbsName, err)
	}
	total := int64(n) + rest
	if total > maxSize {
		return parsed{}, bomb()
	}
	h, err := parseGBSHeader(gbsName, head[:n], total)
	if err != nil {
		return parsed{}, err
	}
	return gbsParsed(FormatAOCX, h, total-h.payloadOffset, nil), nil
}

// elfSection returns the data of the one section called section in f, whose
// data must lie within the first size bytes; missing explains what its
// absence means.
func elfSection(name string, f *elf.File, size int64, section, missing string) (*io.SectionReader, error) {
	var found *elf.Section
	for _, s := range f.Sections {
		if s.Name != section {
			continue
		}
		if found != nil {
			return nil, invalidf("%s: has two %s sections: the AOCX is corrupt", name, section)
		}
		found = s
	}
	switch {
	case found == nil:
		return nil, invalidf("%s: has no %s section: %s", name, section, missing)
	case found.Type == elf.SHT_NOBITS:
		return nil, invalidf("%s: section %s holds no data (SHT_NOBITS): the AOCX is corrupt", name, section)
	case found.Flags&elf.SHF_COMPRESSED != 0:
		return nil, invalidf("%s: section %s is ELF-compressed, which AOCX files never are: the AOCX is corrupt", name, section)
	case found.Offset > uint64(size) || found.Size > uint64(size)-found.Offset:
		return nil, invalidf("%s: section %s claims bytes %d..%d but the data ends at %d: the file is truncated", name, section, found.Offset, found.Offset+found.Size, size)
	}
	return io.NewSectionReader(found, 0, int64(found.Size)), nil
}

// gzipSizeHint reads the uncompressed size a gzip stream's trailer claims,
// bounded by maxSize and by sizeHintRatio times the stream's size; 0 when
// there is no trailer. It is only a capacity hint.
func gzipSizeHint(gz *io.SectionReader, maxSize int64) int64 {
	n := gz.Size()
	if n < 18 { // gzip header (10) + trailer (8)
		return 0
	}
	var t [4]byte
	if _, err := gz.ReadAt(t[:], n-4); err != nil {
		return 0
	}
	return min(int64(binary.LittleEndian.Uint32(t[:])), maxSize, n*sizeHintRatio)
}

var errTooLarge = errors.New("too large")

// readLimited reads r to EOF into one buffer of initial capacity hint (plus
// 3 bytes for padding), failing with errTooLarge past maxSize bytes.
func readLimited(r io.Reader, maxSize, hint int64) ([]byte, error) {
	buf := make([]byte, 0, hint+3)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(int64(cap(buf)), maxSize+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > maxSize {
			return nil, errTooLarge
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
