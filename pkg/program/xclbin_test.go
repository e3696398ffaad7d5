package program

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// TestWriteXclbinLayout checks the bytes WriteXclbin writes at the offsets
// of XRT's struct axlf, independently of parseXclbin.
func TestWriteXclbinLayout(t *testing.T) {
	payload := []byte("0123456789abc") // 13 bytes: the next section is padded to 8
	meta := []byte{1, 2, 3}
	data := xclbinOf(t, XclbinMetadata{
		InterfaceID: strings.ToUpper(dashedUUID(testXIf)), XclbinUUID: testXclbin, Platform: testPlatform,
		Mode: XclbinPR, Timestamp: 1700000000,
		Sections: []XclbinSection{{Kind: XclbinMemTopology, Name: "mem_topology", Data: meta}},
	}, payload)
	le := binary.LittleEndian
	hex16 := func(off int) string { return hex.EncodeToString(data[off : off+16]) }
	for name, tc := range map[string]struct{ got, want any }{
		"magic":             {string(data[:8]), "xclbin2\x00"},
		"signature length":  {int32(le.Uint32(data[8:])), int32(-1)},
		"reserved":          {data[12], byte(0xff)},
		"m_length":          {le.Uint64(data[304:]), uint64(len(data))},
		"m_timeStamp":       {le.Uint64(data[312:]), uint64(1700000000)},
		"m_mode":            {le.Uint16(data[332:]), uint16(1)},
		"interface uuid":    {hex16(336), testXIf},
		"platform VBNV":     {string(data[352 : 352+len(testPlatform)+1]), testPlatform + "\x00"},
		"xclbin uuid":       {hex16(416), testXclbin},
		"m_numSections":     {le.Uint32(data[448:]), uint32(2)},
		"section 0 kind":    {le.Uint32(data[456:]), uint32(0)},
		"section 0 name":    {string(data[460:470]), "bitstream\x00"},
		"section 0 offset":  {le.Uint64(data[456+24:]), uint64(536)}, // 456 + 2*40
		"section 0 size":    {le.Uint64(data[456+32:]), uint64(13)},
		"section 0 data":    {string(data[536:549]), string(payload)},
		"section 1 kind":    {le.Uint32(data[496:]), uint32(6)},
		"section 1 offset":  {le.Uint64(data[496+24:]), uint64(552)}, // 549 aligned to 8
		"section 1 size":    {le.Uint64(data[496+32:]), uint64(3)},
		"section 1 data":    {string(data[552:555]), string(meta)},
		"size (8-aligned)":  {len(data), 560},
		"padding is zeroes": {string(data[549:552]), "\x00\x00\x00"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}

	b := openTestBitstream(t, data)
	want := XclbinInfo{Mode: XclbinPR, Version: "2.0.0", Timestamp: 1700000000, Sections: 2, ImageKind: XclbinBitstream, ImageBytes: 13}
	if b.Format != FormatXclbin || b.InterfaceID != testXIf || b.AFUID != testXclbin || b.Platform != testPlatform ||
		b.Size != 560 || b.PayloadSize != 560 || b.Xclbin != want {
		t.Errorf("Open = %+v, want xclbin info %+v", b, want)
	}
	// What a programmer gets is the whole file, unpadded.
	p, err := b.ReadPayload(sha256Hex(data))
	if err != nil || !bytes.Equal(p, data) {
		t.Fatalf("ReadPayload = %d bytes, %v; want the %d bytes of the file", len(p), err, len(data))
	}
}

// TestReadPayloadXclbinIsExact: a signed xclbin whose size is not a multiple
// of 4 reaches the programmer byte for byte.
func TestReadPayloadXclbinIsExact(t *testing.T) {
	data := xclbinOf(t, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, Signature: []byte("sig!!")}, []byte("bits"))
	if len(data)%4 == 0 {
		t.Fatalf("fixture is %d bytes, want a size that padding would change", len(data))
	}
	b := openTestBitstream(t, data)
	if !b.Xclbin.Signed {
		t.Errorf("Signed = false for a file with a signature")
	}
	p, err := b.ReadPayload("")
	if err != nil || !bytes.Equal(p, data) {
		t.Fatalf("ReadPayload = %q, %v; want the file unchanged", p, err)
	}
}

func TestParseXclbinAccepts(t *testing.T) {
	for name, tc := range map[string]struct {
		meta    XclbinMetadata
		payload []byte
		want    XclbinInfo
	}{
		"flat, no platform": {
			XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin},
			[]byte("x"), XclbinInfo{Mode: XclbinFlat, Version: "2.0.0", Sections: 1, ImageKind: XclbinBitstream, ImageBytes: 1},
		},
		"Versal partial PDI": {
			XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, ImageKind: XclbinPartialPDI, Sections: []XclbinSection{
				{Kind: XclbinPartialPDI, Name: "pdi2", Data: []byte("more")},
				{Kind: XclbinPDI, Name: "other", Data: []byte("other image")},
				{Kind: XclbinIPLayout, Name: "empty"}, // size 0, offset 0: absent
			}},
			[]byte("pdi"), XclbinInfo{Mode: XclbinFlat, Version: "2.0.0", Sections: 4, ImageKind: XclbinPartialPDI, ImageBytes: 7},
		},
		"signed tandem": {
			XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, Mode: XclbinTandemStage2WithPR, Signature: bytes.Repeat([]byte{7}, 512)},
			[]byte("bits"), XclbinInfo{Mode: XclbinTandemStage2WithPR, Version: "2.0.0", Signed: true, Sections: 1, ImageKind: XclbinBitstream, ImageBytes: 4},
		},
	} {
		t.Run(name, func(t *testing.T) {
			data := xclbinOf(t, tc.meta, tc.payload)
			p, err := parseBytes("t.xclbin", data, limits{}.withDefaults())
			if err != nil {
				t.Fatal(err)
			}
			if p.xclbin != tc.want || p.interfaceID != testXIf || p.afuID != testXclbin || p.platform != tc.meta.Platform {
				t.Errorf("parsed %+v, want info %+v", p, tc.want)
			}
		})
	}
}

// mutated returns a copy of a valid xclbin changed by f.
func mutated(t testing.TB, f func(b []byte) []byte) []byte {
	t.Helper()
	return f(bytes.Clone(xclbinFile(t, testXIf, testXclbin, 64)))
}

func TestParseXclbinRefusals(t *testing.T) {
	le := binary.LittleEndian
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint32(b[off:], v); return b }
	}
	put64 := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint64(b[off:], v); return b }
	}
	fill := func(off, n int, c byte) func([]byte) []byte {
		return func(b []byte) []byte {
			for i := off; i < off+n; i++ {
				b[i] = c
			}
			return b
		}
	}
	withLength := func(f func([]byte) []byte) func([]byte) []byte {
		return func(b []byte) []byte { b = f(b); le.PutUint64(b[304:], uint64(len(b))); return b }
	}
	size := len(xclbinFile(t, testXIf, testXclbin, 64))
	metaOnly := xclbinOf(t, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin}, []byte("bits"))
	le.PutUint32(metaOnly[456:], uint32(XclbinMemTopology))

	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"truncated in magic":      {[]byte("xclb"), "shorter than the 456-byte xclbin header"},
		"magic only":              {[]byte(xclbinMagic), "shorter than the 456-byte xclbin header"},
		"older version":           {mutated(t, fill(6, 1, '1')), `xclbin magic is "xclbin1\x00", want "xclbin2\x00"`},
		"no NUL after magic":      {mutated(t, fill(7, 1, ' ')), "only xclbin2 (axlf) files"},
		"cut in the header":       {mutated(t, func(b []byte) []byte { return b[:400] }), "shorter than the 456-byte xclbin header"},
		"m_length too large":      {mutated(t, put64(304, uint64(size+8))), "m_length is " + strconv.Itoa(size+8) + " but the file is " + strconv.Itoa(size) + " bytes"},
		"trailing data":           {mutated(t, func(b []byte) []byte { return append(b, 0) }), "has trailing data"},
		"too many sections":       {mutated(t, put32(448, 0x10001)), "m_numSections is 65537, more than the 65536"},
		"table beyond the file":   {mutated(t, put32(448, 1000)), "section table of 1000 headers ends at byte 40456"},
		"section beyond the file": {mutated(t, put64(456+32, uint64(size))), "xclbin section 0 (BITSTREAM, \"bitstream\") claims bytes"},
		"section size overflow":   {mutated(t, put64(456+32, ^uint64(0))), "claims bytes"},
		"section in the header":   {mutated(t, put64(456+24, 8)), "outside the data area"},
		"signature below -1":      {mutated(t, put32(8, uint32(0xfffffffe))), "signature length -2 is outside -1.."},
		"signature too long":      {mutated(t, put32(8, uint32(size))), "signature length " + strconv.Itoa(size) + " is outside"},
		"hardware emulation":      {mutated(t, func(b []byte) []byte { le.PutUint16(b[332:], 4); return b }), "m_mode is hw-emu: it is built for emulation"},
		"software emulation":      {mutated(t, func(b []byte) []byte { le.PutUint16(b[332:], 5); return b }), "m_mode is sw-emu"},
		"unknown mode":            {mutated(t, func(b []byte) []byte { le.PutUint16(b[332:], 7); return b }), "m_mode is 7, which XRT does not define"},
		"zero interface":          {mutated(t, fill(336, 16, 0)), "interface UUID is 00000000-0000-0000-0000-000000000000 (all zero), the value of an unset field: build it for a platform"},
		"all-f interface":         {mutated(t, fill(336, 16, 0xff)), "interface UUID is ffffffff-ffff-ffff-ffff-ffffffffffff (all f)"},
		"zero xclbin uuid":        {mutated(t, fill(416, 16, 0)), "xclbin UUID is 00000000-0000-0000-0000-000000000000 (all zero), the value of an unset field: rebuild it"},
		"all-f xclbin uuid":       {mutated(t, fill(416, 16, 0xff)), "xclbin UUID is ffffffff-ffff-ffff-ffff-ffffffffffff (all f)"},
		"platform without NUL":    {mutated(t, fill(352, 64, 'a')), "platform VBNV fills all 64 bytes without a terminating NUL"},
		"platform not printable":  {mutated(t, fill(355, 1, '\n')), `platform VBNV "xil\n`},
		"no configuration image":  {metaOnly, "has no BITSTREAM, PDI or BITSTREAM_PARTIAL_PDI section among its 1 sections"},
		"no sections":             {mutated(t, withLength(func(b []byte) []byte { le.PutUint32(b[448:], 0); return b[:456] })), "has no BITSTREAM"},
	} {
		t.Run(name, func(t *testing.T) { wantRefused(t, "t.xclbin", tc.data, tc.want) })
	}
}

// TestParseXclbinTruncatedAtEveryByte cuts a small xclbin at every length:
// no cut may be accepted or panic.
func TestParseXclbinTruncatedAtEveryByte(t *testing.T) {
	data := xclbinFile(t, testXIf, testXclbin, 16)
	wantRefusedUpTo(t, data, len(data)-1)
}

func TestWriteXclbinRefuses(t *testing.T) {
	good := XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin}
	with := func(f func(*XclbinMetadata)) XclbinMetadata { m := good; f(&m); return m }
	for name, tc := range map[string]struct {
		meta    XclbinMetadata
		payload []byte
		want    string
	}{
		"bad interface":     {with(func(m *XclbinMetadata) { m.InterfaceID = "nope" }), []byte("x"), `xclbin metadata InterfaceID: id "nope"`},
		"bad uuid":          {with(func(m *XclbinMetadata) { m.XclbinUUID = "" }), []byte("x"), "xclbin metadata XclbinUUID"},
		"zero interface":    {with(func(m *XclbinMetadata) { m.InterfaceID = allZeroID }), []byte("x"), "interface UUID is 00000000-0000-0000-0000-000000000000 (all zero)"},
		"all-f uuid":        {with(func(m *XclbinMetadata) { m.XclbinUUID = discovery.AllF }), []byte("x"), "xclbin UUID is ffffffff-ffff-ffff-ffff-ffffffffffff (all f)"},
		"long platform":     {with(func(m *XclbinMetadata) { m.Platform = strings.Repeat("p", 64) }), []byte("x"), "is 64 bytes, more than the 63"},
		"unprintable":       {with(func(m *XclbinMetadata) { m.Platform = "a\tb" }), []byte("x"), "non-printable byte 0x09"},
		"emulation":         {with(func(m *XclbinMetadata) { m.Mode = XclbinSWEmu }), []byte("x"), "built for emulation"},
		"metadata as image": {with(func(m *XclbinMetadata) { m.ImageKind = XclbinMemTopology }), []byte("x"), "ImageKind MEM_TOPOLOGY is not a configuration image"},
		"empty payload":     {good, nil, "xclbin payload is empty"},
		"long section name": {with(func(m *XclbinMetadata) { m.Sections = []XclbinSection{{Name: "sixteen-bytes-xx"}} }), []byte("x"), `section name "sixteen-bytes-xx" is 16 bytes`},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			wantErr(t, WriteXclbin(&b, tc.meta, tc.payload), tc.want)
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes before refusing", b.Len())
			}
		})
	}
}

func FuzzParseXclbin(f *testing.F) {
	f.Add(xclbinFile(f, testXIf, testXclbin, 16))
	f.Add(xclbinOf(f, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, ImageKind: XclbinPDI, Signature: []byte("sig")}, []byte("pdi")))
	f.Add(xclbinOf(f, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, Sections: []XclbinSection{{Kind: XclbinClearingBitstream, Name: "clear", Data: []byte("c")}, {Kind: XclbinIPLayout}}}, []byte("b")))
	f.Add([]byte(xclbinMagic))
	f.Add(mutated(f, func(b []byte) []byte { binary.LittleEndian.PutUint32(b[448:], 0x10000); return b }))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParsed(t, data)
		p, err := parseBytes("fuzz", data, limits{maxFile: 1 << 20, maxDecompressed: 64 << 10})
		if err != nil || p.format != FormatXclbin {
			return
		}
		// An accepted xclbin is usable as XRT checks it, and goes to the
		// programmer whole.
		if p.interfaceID == allZeroID || p.afuID == allZeroID || p.xclbin.Mode.emulation() || !p.xclbin.ImageKind.configImage() ||
			p.xclbin.Sections > xclbinMaxSections || binary.LittleEndian.Uint64(data[xclbinOffLength:]) != uint64(len(data)) ||
			!bytes.Equal(p.payload, data) {
			t.Fatalf("accepted an unusable xclbin: %+v", p)
		}
	})
}

// BenchmarkXclbinVerify measures ReadPayload with a sha256 pin on a 64 MiB
// xclbin: the read, hash and parse Load does before handing the file to
// XRT. Compare its throughput with `sha256sum` on a file of the same size.
func BenchmarkXclbinVerify(b *testing.B) {
	payload := benchPayload(64<<20 - xclbinHeaderLen - xclbinSectionLen) // the file is 64 MiB
	benchmarkVerify(b, "big.xclbin", xclbinOf(b, XclbinMetadata{InterfaceID: testXIf, XclbinUUID: testXclbin, Platform: testPlatform, Mode: XclbinPR}, payload))
}
