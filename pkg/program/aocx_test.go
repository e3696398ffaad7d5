package program

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"io"
	"runtime"
	"testing"
)

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestWriteAOCXReadsBackWithDebugELF checks the file WriteAOCX makes with
// the standard library's ELF reader, independently of parseAOCX.
func TestWriteAOCXReadsBackWithDebugELF(t *testing.T) {
	gbs := gbsFile(t, testIf, testAFU, 1000)
	data := aocxFile(t, testIf, testAFU, 1000)

	section := func(f *elf.File, name string) []byte {
		t.Helper()
		if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB {
			t.Fatalf("ELF class %v data %v, want 64-bit little-endian", f.Class, f.Data)
		}
		var names []string
		for _, s := range f.Sections {
			names = append(names, s.Name)
		}
		if len(names) != 3 || names[1] != name || names[2] != ".shstrtab" {
			t.Fatalf("sections %q, want [\"\" %s .shstrtab]", names, name)
		}
		b, err := f.Section(name).Data()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	outer, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := elf.NewFile(bytes.NewReader(section(outer, aocxBinSection)))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(section(inner, aocxGBSSection)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, gbs) {
		t.Fatalf("decompressed .acl.gbs.gz differs from the GBS written")
	}

	p, err := parseBytes("t.aocx", data, limits{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if p.format != FormatAOCX || p.interfaceID != testIf || p.afuID != testAFU || p.payloadSize != 1000 || len(p.payload) != 1000 {
		t.Errorf("parsed %s %s %s payload %d/%d", p.format, p.interfaceID, p.afuID, p.payloadSize, len(p.payload))
	}
}

func TestWriteAOCXRefusesNonGBS(t *testing.T) {
	wantErr(t, WriteAOCX(io.Discard, []byte("not a gbs at all, not even close")), "AOCX content", "not the GBS magic")
}

func TestParseAOCXRefusals(t *testing.T) {
	gbs := gbsFile(t, testIf, testAFU, 64)
	gz := gzipped(t, gbs)
	corrupt := bytes.Clone(gz)
	corrupt[len(corrupt)-5] ^= 0xff // CRC32 of the trailer
	var noSection bytes.Buffer
	if err := writeELF(&noSection, ".text", []byte("code")); err != nil {
		t.Fatal(err)
	}
	var notNested bytes.Buffer
	if err := writeELF(&notNested, aocxBinSection, []byte("not an ELF file")); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"truncated ELF header": {[]byte("\x7fELF\x02\x01"), "not a readable ELF file"},
		"no .acl.fpga.bin":     {noSection.Bytes(), "has no .acl.fpga.bin section: the file is an ELF file but not an AOCX"},
		"nested not ELF":       {notNested.Bytes(), ".acl.fpga.bin: not a readable ELF file"},
		"no .acl.gbs.gz":       {aocxOf(t, aocxBinSection, ".acl.sof", gz), "has no .acl.gbs.gz section"},
		"not gzip":             {aocxOf(t, aocxBinSection, aocxGBSSection, gbs), ".acl.gbs.gz: not gzip data"},
		"truncated gzip":       {aocxOf(t, aocxBinSection, aocxGBSSection, gz[:len(gz)/2]), "decompress"},
		"corrupt gzip":         {aocxOf(t, aocxBinSection, aocxGBSSection, corrupt), "gzip: invalid checksum"},
		"gzip of non-GBS":      {aocxOf(t, aocxBinSection, aocxGBSSection, gzipped(t, []byte("hello world, no GBS here"))), ".acl.gbs.gz: starts with"},
		"gzip of bad GBS":      {aocxOf(t, aocxBinSection, aocxGBSSection, gzipped(t, rawGBS(`{"x":`, []byte("abcd")))), ".acl.gbs.gz: GBS metadata is not valid JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseBytes("t.aocx", tc.data, limits{}.withDefaults())
			wantErr(t, err, "t.aocx", tc.want)
			if !errors.Is(err, ErrInvalidBitstream) {
				t.Errorf("error %q does not match ErrInvalidBitstream", err)
			}
			_, err2 := parseFile("t.aocx", bytes.NewReader(tc.data), int64(len(tc.data)), limits{}.withDefaults())
			wantErr(t, err2, "t.aocx", tc.want)
		})
	}
}

func TestParseAOCXSectionBeyondFile(t *testing.T) {
	data := aocxFile(t, testIf, testAFU, 64)
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	// Cut the file inside the .acl.fpga.bin data.
	s := f.Section(aocxBinSection)
	cut := bytes.Clone(data[:s.Offset+s.Size/2])
	_, err = parseBytes("t.aocx", cut, limits{}.withDefaults())
	// The section headers are gone with the cut, so debug/elf refuses it.
	if !errors.Is(err, ErrInvalidBitstream) {
		t.Fatalf("got %v, want an invalid-bitstream error", err)
	}
}

// TestParseAOCXTruncatedAtEveryByte cuts a small AOCX at every length: no
// cut may be accepted or panic.
func TestParseAOCXTruncatedAtEveryByte(t *testing.T) {
	data := aocxFile(t, testIf, testAFU, 16)
	wantRefusedUpTo(t, data, len(data)-1)
}

func TestParseAOCXGzipBomb(t *testing.T) {
	// 4 MiB of zeros compress to a few KiB.
	big := gbsWithPayload(t, testIf, testAFU, make([]byte, 4<<20))
	data := aocxOf(t, aocxBinSection, aocxGBSSection, gzipped(t, big))
	if len(data) > 64<<10 {
		t.Fatalf("bomb is %d bytes, want a small file", len(data))
	}
	lim := limits{maxDecompressed: 1 << 20}.withDefaults()
	_, err := parseBytes("bomb.aocx", data, lim)
	wantErr(t, err, "decompresses to more than 1048576 bytes", "decompression bomb")
	_, err = parseFile("bomb.aocx", bytes.NewReader(data), int64(len(data)), lim)
	wantErr(t, err, "decompresses to more than 1048576 bytes")

	// Within the limit the same file is fine.
	p, err := parseBytes("bomb.aocx", data, limits{maxDecompressed: 8 << 20}.withDefaults())
	if err != nil || p.payloadSize != 4<<20 {
		t.Fatalf("within the limit: %v, payload %d", err, p.payloadSize)
	}
}

// TestParseAOCXLyingGzipTrailer: a trailer claiming a huge size must not
// make parsing allocate it.
func TestParseAOCXLyingGzipTrailer(t *testing.T) {
	gz := gzipped(t, gbsFile(t, testIf, testAFU, 64))
	copy(gz[len(gz)-4:], []byte{0xff, 0xff, 0xff, 0x7f})
	data := aocxOf(t, aocxBinSection, aocxGBSSection, gz)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := parseBytes("t.aocx", data, limits{}.withDefaults())
	runtime.ReadMemStats(&after)
	wantErr(t, err, "gzip") // the trailer's size no longer matches
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("parsing allocated %d bytes for a %d-byte file", grew, len(data))
	}
}

func FuzzParseAOCX(f *testing.F) {
	f.Add(aocxFile(f, testIf, testAFU, 16))
	f.Add(aocxOf(f, aocxBinSection, aocxGBSSection, []byte("x")))
	f.Fuzz(checkParsed)
}
