package draplugin_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/draplugin"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/cdi"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// fakeFamily is a fourth card family, defined and registered here, outside
// every package of the driver: each card is a directory below
// sys/class/fakefpga holding interface_id, afu_id, and the major:minor of
// its user node (user, /dev/fake-user<N>) and of its management node (mgmt,
// /dev/fake-mgmt<N>). Its cards load GBS files through fakeProgrammer.
type fakeFamily struct{}

const (
	fakeClassDir = "sys/class/fakefpga"
	fakeDevice   = "fpga-0000-0f-00-0-p0"
)

// fakeDriver is the fake family's kernel driver name.
const fakeDriver discovery.KernelDriver = "fakefpga"

// fakePrograms counts fakeProgrammer's calls.
var fakePrograms atomic.Int64

func init() { program.Register(fakeFamily{}) }

func (fakeFamily) Driver() discovery.KernelDriver { return fakeDriver }

func (fakeFamily) Present(root string) bool {
	_, err := os.Stat(filepath.Join(root, fakeClassDir))
	return err == nil
}

func (fakeFamily) Scan(_ context.Context, s *discovery.Scanner, res *discovery.Result) error {
	dir := filepath.Join(s.Root, fakeClassDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for i, e := range entries {
		c, err := readFakeCard(s.Root, filepath.Join(dir, e.Name()), i)
		if err != nil {
			res.Errors = append(res.Errors, err)
			continue
		}
		res.Cards = append(res.Cards, c)
	}
	return nil
}

func (fakeFamily) Refresh(c *discovery.Card, _ *discovery.Tracker) (*discovery.Card, bool) {
	out, p := *c, *c.Ports[0]
	if id, err := p.ReadAFUID(); err == nil {
		p.AFUID = id
	}
	out.Ports = []*discovery.Port{&p}
	return &out, p.AFUID != c.Ports[0].AFUID
}

func (fakeFamily) Models() map[string]string { return map[string]string{"0x1234:0x0001": "Fake FPGA"} }

func (fakeFamily) ManagementName(path string) bool { return strings.HasPrefix(path, "/dev/fake-mgmt") }

func (fakeFamily) Formats() []program.Format { return []program.Format{program.FormatGBS} }

func (fakeFamily) NewProgrammer(program.ProgrammerConfig) (program.Programmer, error) {
	return fakeProgrammer{}, nil
}

// fakeProgrammer loads a simulated payload (program.SimPayload: the AFU ID
// in its first 16 bytes) by writing that ID into the port's afu_id.
type fakeProgrammer struct{}

func (fakeProgrammer) Name() string { return string(fakeDriver) }

func (fakeProgrammer) Program(_ context.Context, _ *discovery.Card, port *discovery.Port, payload []byte) error {
	fakePrograms.Add(1)
	if len(payload) < 16 {
		return fmt.Errorf("%w: payload of %d bytes", program.ErrProgramFailed, len(payload))
	}
	id := fmt.Sprintf("%016x%016x\n", binary.BigEndian.Uint64(payload[:8]), binary.BigEndian.Uint64(payload[8:16]))
	return os.WriteFile(port.AFUIDPath(), []byte(id), 0o644)
}

// readFakeCard reads the card at dir, the i-th of its class directory.
func readFakeCard(root, dir string, i int) (*discovery.Card, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b)), err
	}
	node := func(name, file string) (discovery.DevNode, error) {
		mm, err := read(file)
		if err != nil {
			return discovery.DevNode{}, err
		}
		major, minor, _ := strings.Cut(mm, ":")
		ma, err1 := strconv.ParseUint(major, 10, 32)
		mi, err2 := strconv.ParseUint(minor, 10, 32)
		if err1 != nil || err2 != nil {
			return discovery.DevNode{}, fmt.Errorf("%s/%s: %q is not major:minor", dir, file, mm)
		}
		return discovery.DevNode{Name: name, SysfsPath: dir, Path: "/dev/" + name, HostPath: filepath.Join(root, "dev", name), Major: uint32(ma), Minor: uint32(mi)}, nil
	}
	ifID, err := read("interface_id")
	if err != nil {
		return nil, err
	}
	user, err := node(fmt.Sprintf("fake-user%d", i), "user")
	if err != nil {
		return nil, err
	}
	mgmt, err := node(fmt.Sprintf("fake-mgmt%d", i), "mgmt")
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("0000:%02x:00.0", 0x0f+i)
	p := &discovery.Port{Node: user, PCIAddress: addr, AFUIDFile: filepath.Join(dir, "afu_id"), Health: discovery.Health{Healthy: true}}
	if p.AFUID, err = p.ReadAFUID(); err != nil {
		return nil, err
	}
	return &discovery.Card{
		Driver: fakeDriver, PCIAddress: addr, PCIPath: dir, VendorID: "0x1234", DeviceID: "0x0001", Model: "Fake FPGA",
		NUMANode: -1, SocketID: -1, Management: []discovery.DevNode{mgmt}, InterfaceID: ifID, InterfaceIDs: []string{ifID},
		Ports: []*discovery.Port{p},
	}, nil
}

// writeFakeCard writes one fake card below root, carrying afu.
func writeFakeCard(t testing.TB, root, afu string) {
	t.Helper()
	dir := filepath.Join(root, fakeClassDir, "fake0")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"interface_id": simnode.DefaultInterfaceID, "afu_id": afu, "user": "240:0", "mgmt": "240:1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFourthFamily registers a card family from outside the driver's
// packages and finds a device of it published, prepared with its user node
// only, and programmed by its own programmer through "auto".
func TestFourthFamily(t *testing.T) {
	auto, err := program.NewProgrammer(program.KindAuto)
	if err != nil {
		t.Fatal(err)
	}
	const loaded = "0123456789abcdef0123456789abcdef"
	claims := &draplugin.Claims{DriverName: driverName, PoolName: nodeName}
	n := startNode(t, nodeOptions{
		sim: simnode.Options{Cards: 1}, node: testnode.Options{Backend: auto}, claims: claims,
		configure: func(c *draplugin.Config) { writeFakeCard(t, c.Scanner.Root, loaded) },
	})
	pn := &preparingNode{testNode: n, state: n.State}
	got := n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return afuOf(s, fakeDevice) == loaded })
	for _, d := range got[0].Spec.Devices {
		if v := d.Attributes[driverName+"/"+deviceslice.AttrKernelDriver].StringValue; d.Name == fakeDevice && (v == nil || *v != string(fakeDriver)) {
			t.Errorf("%s kernelDriver %v, want %s", d.Name, v, fakeDriver)
		}
	}

	before := fakePrograms.Load()
	dra := n.draClient(t)
	c := pn.claim(t, []string{fakeDevice}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	r := pn.prepare(t, dra, c)
	if r.Error != "" {
		t.Fatalf("prepare: %s", r.Error)
	}
	if got := fakePrograms.Load() - before; got != 1 {
		t.Fatalf("fake programmer called %d times, want 1", got)
	}
	nodes, env := cdiEdits(t, n.CDIDir, r.Devices[0].CdiDeviceIds)
	if want := "/dev/fake-user0=" + filepath.Join(n.sim.Root, "dev/fake-user0"); len(nodes) != 1 || nodes[0] != want {
		t.Fatalf("CDI device nodes %v, want exactly [%s]", nodes, want)
	}
	if !strings.Contains(strings.Join(env, " "), "FPGA_AFU_IDS="+NewAFU) {
		t.Errorf("env %v does not carry the programmed AFU", env)
	}
	n.driver.RefreshDevices() // as the daemon does once a region is programmed
	n.waitSlices(t, func(s []resourceapi.ResourceSlice) bool { return afuOf(s, fakeDevice) == NewAFU })
	pn.unprepare(t, dra, c)

	// A discovery bug that lists the family's management node as a user
	// node never reaches a container.
	res := n.driver.Devices()
	card, port, ok := res.FindPort(fakeDevice)
	if !ok {
		t.Fatalf("%s not discovered", fakeDevice)
	}
	bad := *port
	bad.ExtraNodes = []discovery.DevNode{{Name: "fake-mgmt7", Path: "/dev/fake-mgmt7", Major: 240, Minor: 7}}
	if _, err := cdi.ContainerNodes(card, &bad); err == nil || !strings.Contains(err.Error(), string(fakeDriver)) {
		t.Errorf("ContainerNodes with a management-named node: %v, want a refusal naming family %s", err, fakeDriver)
	}
}
