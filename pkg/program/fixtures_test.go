package program

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// IDs from the Intel device plugin's test fixture.
const (
	testIf   = "69528db6eb31577a8c3668f9faa081f6"
	testIf2  = "0123456789abcdef0123456789abcdef"
	testAFU  = "d8424dc4a4a3c413f89e433683f9040b"
	testAFU2 = "f7df405cbd7acf7222f144b0b93acd18"
)

// IDs of an Alveo card's shell and of xclbins built for it.
const (
	testXIf       = "5e3b7c9a1f0d4e2b8c6a9d7f1e3b5c7a"
	testXclbin    = "8f8dc2ff4dd74a1fa9e15a8d7a2c9c8d"
	testXclbin2   = "1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f"
	testPlatform  = "xilinx_u250_gen3x16_xdma_shell_4_1"
	testUserPF    = "0000:3b:00.1"
	testXclbinDsh = "8f8dc2ff-4dd7-4a1f-a9e1-5a8d7a2c9c8d"
)

// xclbinFile returns a valid xclbin for the IDs (PR mode, platform
// testPlatform) whose BITSTREAM section is payloadLen bytes following the
// simulated payload convention, followed by a small MEM_TOPOLOGY section.
func xclbinFile(t testing.TB, ifID, uuid string, payloadLen int) []byte {
	t.Helper()
	payload, err := SimPayload(uuid, payloadLen)
	if err != nil {
		t.Fatal(err)
	}
	return xclbinOf(t, XclbinMetadata{InterfaceID: ifID, XclbinUUID: uuid, Platform: testPlatform, Mode: XclbinPR,
		Sections: []XclbinSection{{Kind: XclbinMemTopology, Name: "mem_topology", Data: []byte{1, 0, 0, 0, 1, 1}}}}, payload)
}

func xclbinOf(t testing.TB, m XclbinMetadata, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteXclbin(&b, m, payload); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// xrtTestCard builds an Alveo card as discovery reports it: one port on the
// user function, whose xclbinuuid (in a temporary sysfs directory) shows
// loaded dashed, or nothing when loaded is "".
func xrtTestCard(t testing.TB, ifID, loaded string) *discovery.Card {
	t.Helper()
	sys := filepath.Join(t.TempDir(), "sys/bus/pci/devices", testUserPF)
	content := ""
	if loaded != "" {
		content = dashedUUID(loaded) + "\n"
	}
	uuidFile := writeFile(t, sys, "xclbinuuid", []byte(content))
	return &discovery.Card{
		Driver:      discovery.DriverXRT,
		PCIAddress:  testUserPF,
		PCIPath:     sys,
		PortsNum:    1,
		InterfaceID: ifID,
		Ports: []*discovery.Port{{
			Node:       discovery.DevNode{Name: "renderD128", SysfsPath: sys, Path: "/dev/dri/renderD128"},
			ID:         0,
			PCIAddress: testUserPF,
			AFUID:      loaded,
			AFUIDFile:  uuidFile,
		}},
	}
}

// gbsFile returns a valid GBS for the IDs whose payload (payloadLen bytes,
// rounded up to 4 and at least 16) follows the simulated payload convention.
func gbsFile(t testing.TB, ifID, afuID string, payloadLen int) []byte {
	t.Helper()
	payload, err := SimPayload(afuID, payloadLen)
	if err != nil {
		t.Fatal(err)
	}
	return gbsWithPayload(t, ifID, afuID, payload)
}

func gbsWithPayload(t testing.TB, ifID, afuID string, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteGBS(&b, NewGBSMetadata(ifID, afuID, "test_afu"), payload); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// aocxFile returns a valid AOCX wrapping gbsFile(ifID, afuID, payloadLen).
func aocxFile(t testing.TB, ifID, afuID string, payloadLen int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteAOCX(&b, gbsFile(t, ifID, afuID, payloadLen)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rawGBS builds a GBS from raw metadata text, bypassing WriteGBS's checks.
func rawGBS(meta string, payload []byte) []byte {
	b := []byte(gbsMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(meta)))
	b = append(b, meta...)
	return append(b, payload...)
}

// metaJSON returns GBS metadata JSON with the given interface UUID and
// clusters JSON array.
func metaJSON(ifUUID, clusters string) string {
	return `{"version":1,"platform-name":"PAC","afu-image":{"interface-uuid":"` + ifUUID +
		`","magic-no":488605312,"power":0,"clock-frequency-high":400,"clock-frequency-low":200,` +
		`"afu-top-interface":{"class":"ccip_std_afu"},"accelerator-clusters":` + clusters + `}}`
}

func cluster(afuUUID string) string {
	return `{"name":"nlb","total-contexts":1,"accelerator-type-uuid":"` + afuUUID + `"}`
}

// aocxOf wraps arbitrary gzip bytes (or raw bytes) in the AOCX structure,
// bypassing WriteAOCX's checks.
func aocxOf(t testing.TB, outerSection, innerSection string, content []byte) []byte {
	t.Helper()
	var inner, outer bytes.Buffer
	if err := writeELF(&inner, innerSection, content); err != nil {
		t.Fatal(err)
	}
	if err := writeELF(&outer, outerSection, inner.Bytes()); err != nil {
		t.Fatal(err)
	}
	return outer.Bytes()
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// replaceFile swaps the file at dir/name for data with a rename, as
// deployment tools do; the file gets a new inode.
func replaceFile(t testing.TB, dir, name string, data []byte) {
	t.Helper()
	tmp := writeFile(t, dir, "."+filepath.Base(name)+".tmp", data)
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// ageTree sets the mtime of dir and every directory below it an hour back,
// so that a scan does not consider them racy and any later change shows.
func ageTree(t testing.TB, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			err = os.Chtimes(p, old, old)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testCard builds a card with n ports whose sysfs directories live in a
// temporary directory, each with an afu_id file holding afuID.
func testCard(t testing.TB, ifID string, n int, afuID string) *discovery.Card {
	t.Helper()
	root := t.TempDir()
	card := &discovery.Card{
		Driver:      discovery.DriverDFL,
		PCIAddress:  "0000:81:00.0",
		FME:         discovery.DevNode{Name: "dfl-fme.0", HostPath: filepath.Join(root, "dev", "dfl-fme.0")},
		PortsNum:    n,
		InterfaceID: ifID,
	}
	for i := 0; i < n; i++ {
		name := "dfl-port." + strconv.Itoa(i)
		sys := filepath.Join(root, "sys", name)
		writeFile(t, sys, "afu_id", []byte(afuID+"\n"))
		card.Ports = append(card.Ports, &discovery.Port{
			Node:       discovery.DevNode{Name: name, SysfsPath: sys, Path: "/dev/" + name},
			ID:         i,
			PCIAddress: card.PCIAddress,
			AFUID:      afuID,
		})
	}
	return card
}

func readAFUIDFile(t testing.TB, port *discovery.Port) string {
	t.Helper()
	b, err := os.ReadFile(port.AFUIDPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantErr fails t unless err is non-nil and contains every fragment.
func wantErr(t testing.TB, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error %q does not contain %q", err, f)
		}
	}
}

// isCanonical reports whether id is 32 lowercase hex digits.
func isCanonical(id string) bool {
	c, err := discovery.CanonicalID(id)
	return err == nil && c == id
}

// xrtStandIn is the XRT family as this package's tests see it: package
// family/xrt imports this one, so they cannot import it. It programs and
// reads back as that family does, and finds no cards.
type xrtStandIn struct{}

func init() { Register(xrtStandIn{}) }

func (xrtStandIn) Driver() discovery.KernelDriver { return discovery.DriverXRT }
func (xrtStandIn) Present(string) bool            { return false }
func (xrtStandIn) Scan(context.Context, *discovery.Scanner, *discovery.Result) error {
	return nil
}
func (xrtStandIn) Refresh(c *discovery.Card, _ *discovery.Tracker) (*discovery.Card, bool) {
	return c, false
}
func (xrtStandIn) Models() map[string]string  { return nil }
func (xrtStandIn) ManagementName(string) bool { return false }
func (xrtStandIn) Formats() []Format          { return []Format{FormatXclbin} }
func (xrtStandIn) NewProgrammer(cfg ProgrammerConfig) (Programmer, error) {
	return NewXRTProgrammer(cfg.XRT)
}
func (xrtStandIn) ReadLoaded(port *discovery.Port, want string) (string, error) {
	return ReadXclbinUUID(port, want)
}
func (xrtStandIn) LoadedKind() string { return "xclbin" }
