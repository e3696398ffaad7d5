package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

func TestWriteClaimSpecInjectsOnlyThePorts(t *testing.T) {
	w, dir := newTestWriter(t)
	card := testCard("/sim")
	const programmed = "0123456789abcdef0123456789abcdef"

	ids, err := w.WriteClaimSpec(testClaimUID, testDevices(card, programmed))
	if err != nil {
		t.Fatalf("WriteClaimSpec() error = %v", err)
	}
	wantIDs := []string{
		"fpga.dra.dev/port=" + testClaimUID + "-fpga-0000-81-00-0-p0",
		"fpga.dra.dev/port=" + testClaimUID + "-fpga-0000-81-00-1-p1",
	}
	if diff := cmp.Diff(wantIDs, ids); diff != "" {
		t.Fatalf("WriteClaimSpec() IDs mismatch (-want +got):\n%s", diff)
	}

	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("NewCache() error = %v", err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	for _, id := range ids {
		if cache.GetDevice(id) == nil {
			t.Errorf("CDI cache does not resolve %s; it has %v", id, cache.ListDevices())
		}
	}

	ociSpec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(ociSpec, ids...); err != nil {
		t.Fatalf("InjectDevices() error = %v (unresolved %v)", err, unresolved)
	}

	wantDevices := []oci.LinuxDevice{
		{Path: "/dev/dfl-port.0", Type: "c", Major: testPortMajor, Minor: 0},
		{Path: "/dev/dfl-port.1", Type: "c", Major: testPortMajor, Minor: 1},
	}
	if diff := cmp.Diff(wantDevices, ociSpec.Linux.Devices); diff != "" {
		t.Errorf("OCI devices mismatch (-want +got):\n%s", diff)
	}
	var rules []string
	for _, r := range ociSpec.Linux.Resources.Devices {
		rules = append(rules, ruleString(r))
	}
	wantRules := []string{"allow c 241:0 rw", "allow c 241:1 rw"}
	if diff := cmp.Diff(wantRules, rules); diff != "" {
		t.Errorf("OCI device cgroup rules mismatch (-want +got):\n%s", diff)
	}
	for _, d := range ociSpec.Linux.Devices {
		if strings.Contains(d.Path, "fme") || d.Major == testFMEMajor {
			t.Errorf("OCI spec holds the FME node: %+v", d)
		}
	}

	wantEnv := []string{
		"FPGA_PORTS=/dev/dfl-port.0,/dev/dfl-port.1",
		"FPGA_AFU_IDS=" + programmed + "," + testAFUID1,
		"FPGA_INTERFACE_IDS=" + testInterfaceID + "," + testInterfaceID,
		"ACCELERATOR_UNITS=0000:81:00.0,0000:81:00.1",
	}
	if diff := cmp.Diff(wantEnv, ociSpec.Process.Env); diff != "" {
		t.Errorf("OCI env mismatch (-want +got):\n%s", diff)
	}
}

// ruleString renders a device cgroup rule as "allow c 241:0 rw".
func ruleString(r oci.LinuxDeviceCgroup) string {
	verb := "deny"
	if r.Allow {
		verb = "allow"
	}
	num := func(p *int64) string {
		if p == nil {
			return "*"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("%s %s %s:%s %s", verb, r.Type, num(r.Major), num(r.Minor), r.Access)
}

func TestWriteClaimSpecFile(t *testing.T) {
	w, dir := newTestWriter(t)
	if _, err := w.WriteClaimSpec(testClaimUID, testDevices(testCard("/sim"), "")); err != nil {
		t.Fatalf("WriteClaimSpec() error = %v", err)
	}
	if diff := cmp.Diff([]string{specFile(testClaimUID)}, dirNames(t, dir)); diff != "" {
		t.Fatalf("spec directory mismatch (-want +got):\n%s", diff)
	}
	path := filepath.Join(dir, specFile(testClaimUID))
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("Stat() error = %v", err)
	}
	if got := info.Mode().Perm(); got != 0o644 {
		t.Errorf("spec file mode = %v, want 0644", got)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile() error = %v", err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatalf("spec is not JSON: %v", err)
	}
	// HostPath, which the simulated root needs, is the newest feature used:
	// it came with CDI 0.5.0, so runtimes that only know 0.5.0 read the spec.
	if spec.Version != "0.5.0" {
		t.Errorf("cdiVersion = %q, want the minimum for the content, 0.5.0", spec.Version)
	}
	if spec.Kind != "fpga.dra.dev/port" {
		t.Errorf("kind = %q, want fpga.dra.dev/port", spec.Kind)
	}
	for _, d := range spec.Devices {
		nodes := d.ContainerEdits.DeviceNodes
		if len(nodes) != 1 {
			t.Fatalf("device %s has %d device nodes, want exactly the port's", d.Name, len(nodes))
		}
		want := "/sim" + nodes[0].Path
		if nodes[0].HostPath != want || nodes[0].Permissions != "rw" || nodes[0].Type != "c" {
			t.Errorf("device %s node = %+v, want host path %s, type c, permissions rw", d.Name, *nodes[0], want)
		}
	}
}

func TestWriteClaimSpecNamesAreUniquePerClaim(t *testing.T) {
	w, dir := newTestWriter(t)
	card := testCard("")
	// The same port, prepared for one claim after the other.
	idsA, err := w.WriteClaimSpec(testClaimUID, []Device{NewDevice(card, card.Ports[0], "")})
	if err != nil {
		t.Fatalf("WriteClaimSpec(A) error = %v", err)
	}
	idsB, err := w.WriteClaimSpec(testOtherUID, []Device{NewDevice(card, card.Ports[0], testAFUID1)})
	if err != nil {
		t.Fatalf("WriteClaimSpec(B) error = %v", err)
	}
	if idsA[0] == idsB[0] {
		t.Fatalf("two claims got the same CDI device ID %s", idsA[0])
	}

	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("NewCache() error = %v", err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ociSpec, idsB...); err != nil {
		t.Fatalf("InjectDevices() error = %v", err)
	}
	if !slices.Contains(ociSpec.Process.Env, "FPGA_AFU_IDS="+testAFUID1) || len(ociSpec.Process.Env) != 4 {
		t.Errorf("claim B's container env = %q, want only claim B's variables", ociSpec.Process.Env)
	}
}

func TestWriteClaimSpecReplaces(t *testing.T) {
	w, dir := newTestWriter(t)
	card := testCard("")
	if _, err := w.WriteClaimSpec(testClaimUID, []Device{NewDevice(card, card.Ports[0], "")}); err != nil {
		t.Fatalf("WriteClaimSpec(one port) error = %v", err)
	}
	if _, err := w.WriteClaimSpec(testClaimUID, testDevices(card, "")); err != nil {
		t.Fatalf("WriteClaimSpec(two ports) error = %v", err)
	}
	if diff := cmp.Diff([]string{specFile(testClaimUID)}, dirNames(t, dir)); diff != "" {
		t.Fatalf("spec directory mismatch (-want +got):\n%s", diff)
	}
	spec, err := cdiapi.ReadSpec(filepath.Join(dir, specFile(testClaimUID)), 0)
	if err != nil {
		t.Fatalf("ReadSpec() error = %v", err)
	}
	if len(spec.Devices) != 2 {
		t.Errorf("spec has %d devices, want the 2 of the second write", len(spec.Devices))
	}
}

func TestWriteClaimSpecRejects(t *testing.T) {
	card := testCard("")
	fmeAsPort := &discovery.Port{Node: card.FME, ID: 0, PCIAddress: card.PCIAddress}
	fmeNumbers := &discovery.Port{Node: card.FME, ID: 0, PCIAddress: card.PCIAddress}
	fmeNumbers.Node.Path = "/dev/renamed"
	relative := &discovery.Port{Node: card.Ports[0].Node, ID: 0, PCIAddress: card.PCIAddress}
	relative.Node.Path = "dev/dfl-port.0"

	tests := []struct {
		name     string
		claimUID string
		devices  []Device
		wantErr  string
	}{
		{name: "empty claim UID", devices: testDevices(card, ""), wantErr: "claim UID is empty"},
		{name: "claim UID with a slash", claimUID: "a/../b", devices: testDevices(card, ""),
			wantErr: `claim UID "a/../b": want ASCII letters, digits and inner '-' only`},
		{name: "claim UID ending in a dash", claimUID: "abc-", devices: testDevices(card, ""), wantErr: `claim UID "abc-"`},
		{name: "claim UID too long", claimUID: strings.Repeat("a", 129), devices: testDevices(card, ""), wantErr: "more than 128"},
		{name: "no devices", claimUID: testClaimUID, wantErr: "no devices"},
		{name: "zero device", claimUID: testClaimUID, devices: []Device{{}}, wantErr: "device 0: device was not built by NewDevice"},
		{name: "device twice", claimUID: testClaimUID,
			devices: []Device{NewDevice(card, card.Ports[0], ""), NewDevice(card, card.Ports[0], "")},
			wantErr: "device fpga-0000-81-00-0-p0 is given twice"},
		{name: "no card", claimUID: testClaimUID, devices: []Device{NewDevice(nil, card.Ports[0], "")}, wantErr: "no card"},
		{name: "no port", claimUID: testClaimUID, devices: []Device{NewDevice(card, nil, "")}, wantErr: "has no port"},
		{name: "relative node path", claimUID: testClaimUID, devices: []Device{NewDevice(card, relative, "")},
			wantErr: `node path "dev/dfl-port.0" is not absolute`},
		{name: "FME node as a port", claimUID: testClaimUID, devices: []Device{NewDevice(card, fmeAsPort, "")},
			wantErr: "is the card's management node /dev/dfl-fme.0 (240:0): refusing to hand it to a container"},
		{name: "FME numbers under another name", claimUID: testClaimUID, devices: []Device{NewDevice(card, fmeNumbers, "")},
			wantErr: "refusing to hand it to a container"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, dir := newTestWriter(t)
			ids, err := w.WriteClaimSpec(tc.claimUID, tc.devices)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("WriteClaimSpec() = %v, %v; want an error containing %q", ids, err, tc.wantErr)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("a rejected write left files %v", names)
			}
		})
	}
}

func TestWriteClaimSpecFailureKeepsOldSpec(t *testing.T) {
	card := testCard("")
	tests := []struct {
		name string
		// breakWrite makes the next write fail after the temporary file
		// is written; it returns the expected error text.
		breakWrite func(t *testing.T, w *Writer) string
	}{
		{
			name: "rename fails",
			breakWrite: func(t *testing.T, w *Writer) string {
				w.rename = func(string, string) error { return errors.New("injected rename failure") }
				return "injected rename failure"
			},
		},
		{
			name: "CDI validation rejects the spec",
			breakWrite: func(t *testing.T, w *Writer) string {
				cdiapi.SetSpecValidator(rejectAll{})
				t.Cleanup(func() { cdiapi.SetSpecValidator(nil) })
				return "invalid CDI spec"
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w, dir := newTestWriter(t)
			path := filepath.Join(dir, specFile(testClaimUID))
			if _, err := w.WriteClaimSpec(testClaimUID, []Device{NewDevice(card, card.Ports[0], "")}); err != nil {
				t.Fatalf("first WriteClaimSpec() error = %v", err)
			}
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("ReadFile() error = %v", err)
			}

			wantErr := tc.breakWrite(t, w)
			_, err = w.WriteClaimSpec(testClaimUID, testDevices(card, ""))
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("WriteClaimSpec() error = %v, want one containing %q", err, wantErr)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the failed write removed the old spec: %v", err)
			}
			if string(before) != string(after) {
				t.Errorf("the failed write changed the old spec:\n%s", after)
			}
			if diff := cmp.Diff([]string{specFile(testClaimUID)}, dirNames(t, dir)); diff != "" {
				t.Errorf("spec directory mismatch after a failed write (-want +got):\n%s", diff)
			}
		})
	}
}

// rejectAll is a CDI spec validator that rejects every spec.
type rejectAll struct{}

func (rejectAll) Validate(*cdispec.Spec) error { return errors.New("rejected by test validator") }

func TestWriteClaimSpecReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to read-only directories; TestWriteClaimSpecFailureKeepsOldSpec covers late failures")
	}
	w, dir := newTestWriter(t)
	card := testCard("")
	if _, err := w.WriteClaimSpec(testClaimUID, []Device{NewDevice(card, card.Ports[0], "")}); err != nil {
		t.Fatalf("first WriteClaimSpec() error = %v", err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatalf("Chmod() error = %v", err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	if _, err := w.WriteClaimSpec(testClaimUID, testDevices(card, "")); err == nil {
		t.Fatal("WriteClaimSpec() into a read-only directory succeeded")
	}
	spec, err := cdiapi.ReadSpec(filepath.Join(dir, specFile(testClaimUID)), 0)
	if err != nil || len(spec.Devices) != 1 {
		t.Errorf("old spec after the failed write: %v, %v; want it intact with 1 device", spec, err)
	}
}

func TestRemoveClaimSpec(t *testing.T) {
	w, dir := newTestWriter(t)
	card := testCard("")
	for _, uid := range []string{testClaimUID, testOtherUID} {
		if _, err := w.WriteClaimSpec(uid, testDevices(card, "")); err != nil {
			t.Fatalf("WriteClaimSpec(%s) error = %v", uid, err)
		}
	}
	stale := filepath.Join(dir, "."+specFile(testClaimUID)+".123456.tmp")
	if err := os.WriteFile(stale, []byte("{"), 0o600); err != nil {
		t.Fatalf("WriteFile() error = %v", err)
	}

	for i := range 2 { // the second removal finds nothing and succeeds
		if err := w.RemoveClaimSpec(testClaimUID); err != nil {
			t.Fatalf("RemoveClaimSpec() #%d error = %v", i+1, err)
		}
		if ok, err := w.ClaimSpecExists(testClaimUID); ok || err != nil {
			t.Fatalf("ClaimSpecExists() after removal = %v, %v; want false, nil", ok, err)
		}
	}
	if diff := cmp.Diff([]string{specFile(testOtherUID)}, dirNames(t, dir)); diff != "" {
		t.Errorf("spec directory mismatch (-want +got):\n%s", diff)
	}
	if ok, err := w.ClaimSpecExists(testOtherUID); !ok || err != nil {
		t.Errorf("ClaimSpecExists(other claim) = %v, %v; want true, nil", ok, err)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatalf("RemoveAll() error = %v", err)
	}
	if err := w.RemoveClaimSpec(testOtherUID); err != nil {
		t.Errorf("RemoveClaimSpec() with the directory gone error = %v", err)
	}
	if err := w.RemoveClaimSpec("../x"); err == nil {
		t.Error("RemoveClaimSpec(\"../x\") succeeded, want an invalid claim UID error")
	}
}

func TestListClaimSpecs(t *testing.T) {
	w, dir := newTestWriter(t)
	card := testCard("")
	for _, uid := range []string{testOtherUID, testClaimUID} {
		if _, err := w.WriteClaimSpec(uid, testDevices(card, "")); err != nil {
			t.Fatalf("WriteClaimSpec(%s) error = %v", uid, err)
		}
	}
	// Files that are not this Writer's claim specs.
	for _, name := range []string{
		"fpga.dra.dev-port.json",
		"gpu.example.com-gpu_" + testClaimUID + ".json",
		"fpga.dra.dev-region_" + testClaimUID + ".json",
		"fpga.dra.dev-port_" + testClaimUID + ".yaml",
		"fpga.dra.dev-port_bad_uid.json",
		"." + specFile(testClaimUID) + ".42.tmp",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatalf("WriteFile() error = %v", err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, specFile("c0ffee")), 0o755); err != nil {
		t.Fatalf("Mkdir() error = %v", err)
	}

	got, err := w.ListClaimSpecs()
	if err != nil {
		t.Fatalf("ListClaimSpecs() error = %v", err)
	}
	if diff := cmp.Diff([]string{testClaimUID, testOtherUID}, got); diff != "" {
		t.Errorf("ListClaimSpecs() mismatch (-want +got):\n%s", diff)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatalf("RemoveAll() error = %v", err)
	}
	if got, err := w.ListClaimSpecs(); len(got) != 0 || err != nil {
		t.Errorf("ListClaimSpecs() with the directory gone = %v, %v; want none, nil", got, err)
	}
}

func TestNewWriter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "cdi")
	if _, err := NewWriter(testVendor, testClass, dir); err != nil {
		t.Fatalf("NewWriter() error = %v", err)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		t.Fatalf("NewWriter() did not create %s: %v", dir, err)
	}

	for _, tc := range []struct{ vendor, class, dir, wantErr string }{
		{vendor: "", class: testClass, dir: dir, wantErr: `CDI vendor ""`},
		{vendor: "fpga/dra", class: testClass, dir: dir, wantErr: `CDI vendor "fpga/dra"`},
		{vendor: testVendor, class: "port=", dir: dir, wantErr: `CDI class "port="`},
		{vendor: testVendor, class: testClass, dir: "", wantErr: "CDI spec directory is empty"},
	} {
		if _, err := NewWriter(tc.vendor, tc.class, tc.dir); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("NewWriter(%q, %q, %q) error = %v, want one containing %q", tc.vendor, tc.class, tc.dir, err, tc.wantErr)
		}
	}
}

// TestWriteClaimSpecAlveo: an Alveo card's device gets its render node and
// its xfpga user nodes, never the management node, even when discovery
// slipped it in among the user nodes.
func TestWriteClaimSpecAlveo(t *testing.T) {
	mgmt := discovery.DevNode{Name: "xclmgmt15360", Path: "/dev/xclmgmt15360", HostPath: "/dev/xclmgmt15360", Major: 505, Minor: 0}
	port := &discovery.Port{
		Node:       discovery.DevNode{Name: "renderD128", Path: "/dev/dri/renderD128", HostPath: "/dev/dri/renderD128", Major: 226, Minor: 128},
		ExtraNodes: []discovery.DevNode{{Name: "dma.qdma.u15361.0", Path: "/dev/xfpga/dma.qdma.u15361.0", HostPath: "/dev/xfpga/dma.qdma.u15361.0", Major: 506, Minor: 0}},
		PCIAddress: "0000:3c:00.1", AFUID: testAFUID1,
	}
	card := &discovery.Card{Driver: discovery.DriverXRT, PCIAddress: "0000:3c:00.1", InterfaceID: testInterfaceID, Management: []discovery.DevNode{mgmt}, Ports: []*discovery.Port{port}}
	w, dir := newTestWriter(t)
	ids, err := w.WriteClaimSpec(testClaimUID, []Device{NewDevice(card, port, "")})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ociSpec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ociSpec, ids...); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range ociSpec.Linux.Devices {
		paths = append(paths, d.Path)
	}
	if diff := cmp.Diff([]string{"/dev/dri/renderD128", "/dev/xfpga/dma.qdma.u15361.0"}, paths); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	if !slices.Contains(ociSpec.Process.Env, "FPGA_PORTS=/dev/dri/renderD128") ||
		!slices.Contains(ociSpec.Process.Env, "FPGA_DEVICE_NODES=/dev/dri/renderD128,/dev/xfpga/dma.qdma.u15361.0") ||
		!slices.Contains(ociSpec.Process.Env, "FPGA_AFU_IDS="+testAFUID1) {
		t.Errorf("env %q", ociSpec.Process.Env)
	}

	slipped := *port
	slipped.ExtraNodes = append(slices.Clone(port.ExtraNodes), mgmt)
	if _, err := w.WriteClaimSpec(testOtherUID, []Device{NewDevice(card, &slipped, "")}); err == nil || !strings.Contains(err.Error(), "/dev/xclmgmt15360") {
		t.Fatalf("a management node among the user nodes: %v, want it refused", err)
	}
}
