package program

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// GBS layout (Intel PAC green bitstream, little-endian): a 16-byte magic, a
// uint32 metadata length, that many bytes of JSON metadata, then the raw
// bitstream handed to partial reconfiguration.
const (
	gbsMagic          = "XeonFPGA\xb7GBSv001"
	gbsFileMagic      = "XeonFPGA" // first half of gbsMagic; identifies the format
	gbsHeaderLen      = len(gbsMagic) + 4
	maxGBSMetadataLen = 4095
	// maxGBSHeaderLen is the most a GBS header can take: enough to read
	// before parsing the metadata of any GBS file.
	maxGBSHeaderLen = gbsHeaderLen + maxGBSMetadataLen
	// gbsMagicNo is the afu-image magic-no OPAE's packager writes.
	gbsMagicNo = 488605312
)

// GBSMetadata is the JSON metadata of a GBS file.
type GBSMetadata struct {
	Version      int      `json:"version"`
	PlatformName string   `json:"platform-name"`
	AFUImage     AFUImage `json:"afu-image"`
}

// AFUImage describes the accelerator function in a GBS file. InterfaceUUID
// and the one accelerator cluster's AcceleratorTypeUUID are written as dashed
// UUIDs; Bitstream carries their canonical forms.
type AFUImage struct {
	InterfaceUUID string `json:"interface-uuid"`
	MagicNo       int64  `json:"magic-no"`
	// Power (watts) and the user clock frequencies (MHz) are kept as
	// written: packagers write numbers, but a clock left to be resolved at
	// build time may stay a string such as "auto", and this package does not
	// need them.
	Power              json.RawMessage `json:"power,omitempty"`
	ClockFrequencyHigh json.RawMessage `json:"clock-frequency-high,omitempty"`
	ClockFrequencyLow  json.RawMessage `json:"clock-frequency-low,omitempty"`
	// AFUTopInterface is kept as written: this package does not interpret it.
	AFUTopInterface     json.RawMessage      `json:"afu-top-interface,omitempty"`
	AcceleratorClusters []AcceleratorCluster `json:"accelerator-clusters"`
}

// AcceleratorCluster is one accelerator in an AFU image. The
// AcceleratorTypeUUID is the AFU ID a port's afu_id shows once the image is
// loaded.
type AcceleratorCluster struct {
	Name                string `json:"name"`
	TotalContexts       int    `json:"total-contexts"`
	AcceleratorTypeUUID string `json:"accelerator-type-uuid"`
}

// NewGBSMetadata returns the metadata real packagers write for a
// single-cluster AFU, with interfaceID and afuID as dashed UUIDs. IDs that
// are not 32 hex digits are kept as given; WriteGBS then refuses them.
func NewGBSMetadata(interfaceID, afuID, name string) GBSMetadata {
	return GBSMetadata{
		Version: 1,
		AFUImage: AFUImage{
			InterfaceUUID:   dashedUUID(interfaceID),
			MagicNo:         gbsMagicNo,
			Power:           json.RawMessage(`0`),
			AFUTopInterface: json.RawMessage(`{"class":"ccip_std_afu"}`),
			AcceleratorClusters: []AcceleratorCluster{{
				Name:                name,
				TotalContexts:       1,
				AcceleratorTypeUUID: dashedUUID(afuID),
			}},
		},
	}
}

// WriteGBS writes a GBS file holding m and payload to w. It refuses metadata
// that Open would refuse (not exactly one cluster, malformed or all-f IDs,
// JSON longer than 4095 bytes) and an empty payload, so whatever it writes
// can be opened and loaded.
func WriteGBS(w io.Writer, m GBSMetadata, payload []byte) error {
	if _, _, err := metadataIDs("GBS metadata", &m); err != nil {
		return err
	}
	if len(payload) == 0 {
		return fmt.Errorf("GBS payload is empty: pass the raw bitstream to load")
	}
	js, err := json.Marshal(&m)
	if err != nil {
		return fmt.Errorf("encode GBS metadata: %w", err)
	}
	if len(js) > maxGBSMetadataLen {
		return fmt.Errorf("GBS metadata is %d bytes of JSON, more than the %d the format allows: shorten the names or afu-top-interface", len(js), maxGBSMetadataLen)
	}
	hdr := make([]byte, gbsHeaderLen, gbsHeaderLen+len(js))
	copy(hdr, gbsMagic)
	binary.LittleEndian.PutUint32(hdr[len(gbsMagic):], uint32(len(js)))
	hdr = append(hdr, js...)
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("write GBS header: %w", err)
	}
	if _, err := w.Write(payload); err != nil {
		return fmt.Errorf("write GBS payload: %w", err)
	}
	return nil
}

// gbsHeader is what parseGBSHeader learns from a GBS header.
type gbsHeader struct {
	meta        GBSMetadata
	interfaceID string
	afuID       string
	// payloadOffset is where the raw bitstream starts.
	payloadOffset int64
}

// parseGBSHeader parses the GBS header at the start of hdr. size is the
// length of the whole GBS (file or decompressed stream) and hdr holds at least
// its first min(size, maxGBSHeaderLen) bytes. name prefixes every error.
func parseGBSHeader(name string, hdr []byte, size int64) (gbsHeader, error) {
	var h gbsHeader
	if n := min(len(hdr), len(gbsMagic)); !bytes.Equal(hdr[:n], []byte(gbsMagic[:n])) {
		if n < len(gbsFileMagic) || !bytes.Equal(hdr[:len(gbsFileMagic)], []byte(gbsFileMagic)) {
			return h, invalidf("%s: starts with %q, not the GBS magic %q: not a GBS bitstream", name, hdr[:n], gbsFileMagic)
		}
		return h, invalidf("%s: GBS magic is %q, want %q: the file is not a GBS bitstream or uses an unsupported GBS version", name, hdr[:n], gbsMagic)
	}
	if size < int64(gbsHeaderLen) || len(hdr) < gbsHeaderLen {
		return h, invalidf("%s: is %d bytes, shorter than the %d-byte GBS header: the file is truncated", name, size, gbsHeaderLen)
	}
	n := binary.LittleEndian.Uint32(hdr[len(gbsMagic):gbsHeaderLen])
	if n == 0 || n > maxGBSMetadataLen {
		return h, invalidf("%s: GBS metadata length %d is outside 1..%d: the file is not a GBS bitstream or is corrupt", name, n, maxGBSMetadataLen)
	}
	end := gbsHeaderLen + int(n)
	if size < int64(end) || len(hdr) < end {
		return h, invalidf("%s: GBS metadata is %d bytes but the file ends after %d: the file is truncated", name, n, size)
	}
	js := bytes.TrimRight(hdr[gbsHeaderLen:end], "\x00 \t\r\n")
	if err := json.Unmarshal(js, &h.meta); err != nil {
		return h, invalidf("%s: GBS metadata is not valid JSON: %w: the file is corrupt", name, err)
	}
	var err error
	if h.interfaceID, h.afuID, err = metadataIDs(name, &h.meta); err != nil {
		return h, err
	}
	h.payloadOffset = int64(end)
	if size == h.payloadOffset {
		return h, invalidf("%s: GBS has no bitstream after its %d bytes of metadata: the file is truncated", name, n)
	}
	return h, nil
}

// metadataIDs checks that m describes exactly one accelerator and returns its
// canonical interface and AFU IDs.
func metadataIDs(name string, m *GBSMetadata) (interfaceID, afuID string, err error) {
	if n := len(m.AFUImage.AcceleratorClusters); n != 1 {
		return "", "", invalidf("%s: afu-image.accelerator-clusters has %d entries, want exactly 1: only single-accelerator images can be loaded", name, n)
	}
	if interfaceID, err = metadataID(name, "afu-image.interface-uuid", m.AFUImage.InterfaceUUID); err != nil {
		return "", "", err
	}
	afuID, err = metadataID(name, "afu-image.accelerator-clusters[0].accelerator-type-uuid", m.AFUImage.AcceleratorClusters[0].AcceleratorTypeUUID)
	if err != nil {
		return "", "", err
	}
	return interfaceID, afuID, nil
}

func metadataID(name, field, value string) (string, error) {
	if value == "" {
		return "", invalidf("%s: GBS metadata has no %s: rebuild the image with a packager that records it", name, field)
	}
	id, err := discovery.CanonicalID(value)
	if err != nil {
		return "", invalidf("%s: GBS metadata %s is not a UUID: %w: repackage the AFU with valid IDs", name, field, err)
	}
	if id == discovery.AllF {
		return "", invalidf("%s: GBS metadata %s is all f (%s), the ID of an unusable region or function: rebuild the image", name, field, value)
	}
	return id, nil
}

// dashedUUID writes a canonical 32-hex ID in the 8-4-4-4-12 form packagers
// use; anything else is returned unchanged.
func dashedUUID(id string) string {
	c, err := discovery.CanonicalID(id)
	if err != nil {
		return id
	}
	return c[0:8] + "-" + c[8:12] + "-" + c[12:16] + "-" + c[16:20] + "-" + c[20:32]
}
