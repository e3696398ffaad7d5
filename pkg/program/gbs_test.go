package program

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func TestWriteGBSRoundTrip(t *testing.T) {
	payload := []byte("0123456789abcdef-payload")
	data := gbsWithPayload(t, strings.ToUpper(testIf), testAFU, payload)
	if !bytes.HasPrefix(data, []byte("XeonFPGA\xb7GBSv001")) {
		t.Fatalf("GBS starts with %q", data[:16])
	}
	n := binary.LittleEndian.Uint32(data[16:20])
	var raw map[string]any
	if err := json.Unmarshal(data[20:20+n], &raw); err != nil {
		t.Fatalf("metadata is not JSON: %v", err)
	}
	image := raw["afu-image"].(map[string]any)
	if got, want := image["interface-uuid"], "69528db6-eb31-577a-8c36-68f9faa081f6"; got != want {
		t.Errorf("interface-uuid = %v, want dashed %v", got, want)
	}

	p, err := parseBytes("t.gbs", data, limits{}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if p.format != FormatGBS || p.interfaceID != testIf || p.afuID != testAFU {
		t.Errorf("parsed %s %s %s, want gbs %s %s", p.format, p.interfaceID, p.afuID, testIf, testAFU)
	}
	if !bytes.Equal(p.payload, payload) || p.payloadSize != int64(len(payload)) {
		t.Errorf("payload = %q (size %d), want %q", p.payload, p.payloadSize, payload)
	}
	c := p.meta.AFUImage.AcceleratorClusters
	if len(c) != 1 || c[0].Name != "test_afu" || c[0].TotalContexts != 1 || p.meta.AFUImage.MagicNo != gbsMagicNo {
		t.Errorf("metadata = %+v", p.meta)
	}
	if string(p.meta.AFUImage.AFUTopInterface) != `{"class":"ccip_std_afu"}` {
		t.Errorf("afu-top-interface = %s, want it kept raw", p.meta.AFUImage.AFUTopInterface)
	}
}

func TestWriteGBSRefuses(t *testing.T) {
	good := NewGBSMetadata(testIf, testAFU, "x")
	twoClusters := NewGBSMetadata(testIf, testAFU, "x")
	twoClusters.AFUImage.AcceleratorClusters = append(twoClusters.AFUImage.AcceleratorClusters, twoClusters.AFUImage.AcceleratorClusters[0])
	long := NewGBSMetadata(testIf, testAFU, strings.Repeat("n", 4096))
	for name, tc := range map[string]struct {
		meta    GBSMetadata
		payload []byte
		want    string
	}{
		"bad interface":  {NewGBSMetadata("nope", testAFU, "x"), []byte("abcd"), "interface-uuid is not a UUID"},
		"all-f afu":      {NewGBSMetadata(testIf, discovery.AllF, "x"), []byte("abcd"), "all f"},
		"two clusters":   {twoClusters, []byte("abcd"), "has 2 entries"},
		"empty payload":  {good, nil, "payload is empty"},
		"metadata > 4KB": {long, []byte("abcd"), "more than the 4095"},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			wantErr(t, WriteGBS(&b, tc.meta, tc.payload), tc.want)
		})
	}
}

func TestParseGBSRefusals(t *testing.T) {
	payload := []byte("ABCD")
	valid := cluster("d8424dc4-a4a3-c413-f89e-433683f9040b")
	lenPrefix := func(n uint32) []byte {
		return binary.LittleEndian.AppendUint32([]byte(gbsMagic), n)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":                 {nil, "is empty"},
		"truncated in magic":    {[]byte("XeonFP"), "shorter than the 20-byte GBS header"},
		"truncated after magic": {[]byte(gbsMagic), "shorter than the 20-byte GBS header"},
		"truncated in length":   {append([]byte(gbsMagic), 1, 0), "shorter than the 20-byte GBS header"},
		"wrong magic":           {[]byte("NotAGBSfileatall....."), "neither the GBS magic"},
		"wrong version magic":   {append([]byte("XeonFPGA\xb7GBSv002"), 1, 0, 0, 0, '{', '}', 1, 2), "GBS magic is"},
		"metadata length 0":     {append(lenPrefix(0), payload...), "GBS metadata length 0 is outside 1..4095"},
		"metadata length 4096":  {append(lenPrefix(4096), bytes.Repeat([]byte(" "), 5000)...), "GBS metadata length 4096 is outside 1..4095"},
		"metadata truncated":    {append(lenPrefix(100), `{"version":1}`...), "file ends after"},
		"bad JSON":              {rawGBS(`{"version":`, payload), "not valid JSON"},
		"JSON not an object":    {rawGBS(`[1,2]`, payload), "not valid JSON"},
		"zero clusters":         {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", `[]`), payload), "has 0 entries, want exactly 1"},
		"no clusters key":       {rawGBS(`{"afu-image":{"interface-uuid":"69528db6-eb31-577a-8c36-68f9faa081f6"}}`, payload), "has 0 entries"},
		"two clusters":          {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+valid+","+valid+"]"), payload), "has 2 entries, want exactly 1"},
		"no interface uuid":     {rawGBS(metaJSON("", "["+valid+"]"), payload), "no afu-image.interface-uuid"},
		"short interface uuid":  {rawGBS(metaJSON("69528db6-eb31", "["+valid+"]"), payload), "afu-image.interface-uuid is not a UUID"},
		"non-hex interface":     {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081fg", "["+valid+"]"), payload), "non-hex character"},
		"all-f interface":       {rawGBS(metaJSON("ffffffff-ffff-ffff-ffff-ffffffffffff", "["+valid+"]"), payload), "interface-uuid is all f"},
		"no afu uuid":           {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+cluster("")+"]"), payload), "no afu-image.accelerator-clusters[0].accelerator-type-uuid"},
		"bad afu uuid":          {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+cluster("not-a-uuid")+"]"), payload), "accelerator-type-uuid is not a UUID"},
		"all-f afu":             {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+cluster(discovery.AllF)+"]"), payload), "accelerator-type-uuid is all f"},
		"no payload":            {rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+valid+"]"), nil), "no bitstream after"},
	} {
		t.Run(name, func(t *testing.T) { wantRefused(t, "t.gbs", tc.data, tc.want) })
	}
}

// TestParseGBSTruncatedAtEveryByte cuts a valid GBS at every length up to
// its first payload byte: every cut must be refused, and the first one that
// keeps a payload byte accepted.
func TestParseGBSTruncatedAtEveryByte(t *testing.T) {
	data := gbsFile(t, testIf, testAFU, 64)
	off := gbsHeaderLen + int(binary.LittleEndian.Uint32(data[16:20]))
	wantRefusedUpTo(t, data, off)
	p, err := parseBytes("t.gbs", data[:off+1], limits{}.withDefaults())
	if err != nil || p.payloadSize != 1 {
		t.Fatalf("cut after the first payload byte: %v, payload size %d", err, p.payloadSize)
	}
}

func TestParseGBSTolerates(t *testing.T) {
	valid := "[" + cluster("D8424DC4-A4A3-C413-F89E-433683F9040B") + "]"
	for name, meta := range map[string]string{
		"NUL padded metadata": metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", valid) + "\x00\x00\x00",
		"undashed IDs":        metaJSON(testIf, valid),
		"string clocks":       `{"afu-image":{"clock-frequency-high":"auto","clock-frequency-low":"auto-200","power":"12","interface-uuid":"69528DB6EB31577A8C3668F9FAA081F6","accelerator-clusters":` + valid + `}}`,
		"unknown keys":        `{"extra":[1],"afu-image":{"new-key":true,"interface-uuid":"69528DB6EB31577A8C3668F9FAA081F6","accelerator-clusters":` + valid + `}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p, err := parseBytes("t.gbs", rawGBS(meta, []byte("ABCD")), limits{}.withDefaults())
			if err != nil {
				t.Fatal(err)
			}
			if p.interfaceID != testIf || p.afuID != testAFU {
				t.Errorf("IDs %s %s, want canonical %s %s", p.interfaceID, p.afuID, testIf, testAFU)
			}
		})
	}
}

func TestNewGBSMetadataKeepsBadIDs(t *testing.T) {
	m := NewGBSMetadata("xyz", testAFU, "n")
	if m.AFUImage.InterfaceUUID != "xyz" {
		t.Errorf("interface-uuid = %q, want the bad ID kept for WriteGBS to refuse", m.AFUImage.InterfaceUUID)
	}
	if got := m.AFUImage.AcceleratorClusters[0].AcceleratorTypeUUID; got != "d8424dc4-a4a3-c413-f89e-433683f9040b" {
		t.Errorf("accelerator-type-uuid = %q", got)
	}
}

// wantRefused checks that both parse paths refuse data, named name, with
// the same invalid-bitstream error, containing want.
func wantRefused(t *testing.T, name string, data []byte, want string) {
	t.Helper()
	_, err := parseBytes(name, data, limits{}.withDefaults())
	wantErr(t, err, name+": ", want)
	if !errors.Is(err, ErrInvalidBitstream) {
		t.Errorf("error %q does not match ErrInvalidBitstream", err)
	}
	// The header-only path used for indexing refuses it the same way.
	_, err2 := parseFile(name, bytes.NewReader(data), int64(len(data)), limits{}.withDefaults())
	if err2 == nil || err2.Error() != err.Error() {
		t.Errorf("parseFile error %q, parseBytes error %q", err2, err)
	}
}

// wantRefusedUpTo cuts data at every length up to end (inclusive): no cut
// may be accepted or panic.
func wantRefusedUpTo(t *testing.T, data []byte, end int) {
	t.Helper()
	for cut := 0; cut <= end; cut++ {
		if _, err := parseBytes("cut", data[:cut], limits{}.withDefaults()); !errors.Is(err, ErrInvalidBitstream) {
			t.Fatalf("cut at %d of %d: got %v, want an invalid-bitstream error", cut, len(data), err)
		}
	}
}

// checkParsed is the property both fuzz tests hold parsing to: it never
// panics, refuses only with ErrInvalidBitstream, and when it accepts returns
// canonical, usable IDs and the same answer on the streaming path.
func checkParsed(t *testing.T, data []byte) {
	lim := limits{maxFile: 1 << 20, maxDecompressed: 64 << 10}
	p, err := parseBytes("fuzz", data, lim)
	p2, err2 := parseFile("fuzz", bytes.NewReader(data), int64(len(data)), lim)
	if (err == nil) != (err2 == nil) {
		t.Fatalf("parseBytes error %v, parseFile error %v", err, err2)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalidBitstream) || !errors.Is(err2, ErrInvalidBitstream) {
			t.Fatalf("refusals %q / %q do not match ErrInvalidBitstream", err, err2)
		}
		return
	}
	for _, id := range []string{p.interfaceID, p.afuID} {
		if !isCanonical(id) || id == discovery.AllF {
			t.Fatalf("accepted ID %q is not canonical and usable", id)
		}
	}
	if p.interfaceID != p2.interfaceID || p.afuID != p2.afuID || p.format != p2.format || p.payloadSize != p2.payloadSize {
		t.Fatalf("parseBytes %s/%s/%s/%d, parseFile %s/%s/%s/%d", p.format, p.interfaceID, p.afuID, p.payloadSize, p2.format, p2.interfaceID, p2.afuID, p2.payloadSize)
	}
	if p.payloadSize <= 0 || int64(len(p.payload)) != p.payloadSize {
		t.Fatalf("payload of %d bytes, payload size %d", len(p.payload), p.payloadSize)
	}
}

func FuzzParseGBS(f *testing.F) {
	f.Add(gbsFile(f, testIf, testAFU, 16))
	f.Add(gbsFile(f, testIf2, testAFU2, 100))
	f.Add(rawGBS(metaJSON("69528db6-eb31-577a-8c36-68f9faa081f6", "["+cluster(testAFU)+"]"), []byte{1, 2, 3}))
	f.Add([]byte(gbsMagic))
	f.Fuzz(checkParsed)
}
