package slicetemplate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/controller"
	"github.com/fpga-dra/fpga-dra-driver/internal/schedulertest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	_ "github.com/fpga-dra/fpga-dra-driver/pkg/family/xrt" // scans read XRT cards
)

const otherInterfaceID = "0123456789abcdef0123456789abcdef"

func attr(d resourceapi.Device, name string) (resourceapi.DeviceAttribute, bool) {
	a, ok := d.Attributes[resourceapi.QualifiedName(v1alpha1.DriverName+"/"+name)]
	return a, ok
}

func stringAttr(t *testing.T, d resourceapi.Device, name string) string {
	t.Helper()
	a, ok := attr(d, name)
	if !ok || a.StringValue == nil {
		t.Fatalf("device %s: no string attribute %s in %v", d.Name, name, d.Attributes)
	}
	return *a.StringValue
}

// published returns what the daemon publishes for the tree below root: the
// devices draplugin builds from a discovery pass.
func published(t *testing.T, root string, programmable bool) []resourceapi.Device {
	t.Helper()
	res, err := (&discovery.Scanner{Root: root}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	return deviceslice.Devices(res, deviceslice.Options{DriverName: v1alpha1.DriverName, Programmable: programmable, Root: root})
}

func TestForShapeEveryModel(t *testing.T) {
	for _, m := range Models() {
		for _, kd := range m.Drivers {
			for _, vf := range []bool{false, true} {
				if vf && m.VFDeviceID == "" {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/vf=%v", m.Name, kd, vf), func(t *testing.T) {
					s := Shape{Model: m.Name, Cards: 3, KernelDriver: kd, InterfaceID: simnode.DefaultInterfaceID, VirtualFunctions: vf}
					tmpl, err := ForShape(s, Options{})
					if err != nil {
						t.Fatal(err)
					}
					if len(tmpl.Devices) != 3*m.PortsPerCard {
						t.Fatalf("%d devices, want %d", len(tmpl.Devices), 3*m.PortsPerCard)
					}
					readable := discovery.ModelName(m.VendorID, m.DeviceID)
					if readable == m.VendorID+":"+m.DeviceID {
						t.Errorf("the driver has no readable name for model %s (%s)", m.Name, readable)
					}
					names := sets.New[string]()
					for _, d := range tmpl.Devices {
						names.Insert(d.Name)
						for name, want := range map[string]string{
							deviceslice.AttrModel: readable, deviceslice.AttrVendorID: m.VendorID, deviceslice.AttrDeviceID: m.DeviceID,
							deviceslice.AttrInterfaceID: simnode.DefaultInterfaceID, deviceslice.AttrKernelDriver: string(kd),
						} {
							if got := stringAttr(t, d, name); got != want {
								t.Errorf("device %s: %s = %q, want %q", d.Name, name, got, want)
							}
						}
						if kd == discovery.DriverXRT {
							checkShell(t, d, simnode.AlveoModels[m.Name])
						} else if a, _ := attr(d, "virtualFunction"); a.BoolValue == nil || *a.BoolValue != vf {
							t.Errorf("device %s: virtualFunction = %v, want %v", d.Name, a.BoolValue, vf)
						}
						if a, _ := attr(d, deviceslice.AttrProgrammable); a.BoolValue == nil || !*a.BoolValue {
							t.Errorf("device %s: programmable = %v, want true (the daemon's default)", d.Name, a.BoolValue)
						}
						for _, name := range slices.Concat(runtimeOnly, notInModel) {
							if _, ok := attr(d, name); ok {
								t.Errorf("device %s has %s, which a template for a card model cannot know", d.Name, name)
							}
							if _, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok {
								t.Errorf("device %s has %s, which a template for a card model cannot know", d.Name, name)
							}
						}
						if len(d.Taints) != 0 {
							t.Errorf("device %s has taints %v", d.Name, d.Taints)
						}
					}
					if names.Len() != len(tmpl.Devices) {
						t.Errorf("device names repeat: %v", sets.List(names))
					}
				})
			}
		}
	}
}

// checkShell checks that an Alveo device of a template carries the
// attributes of the model's shell, its further interface UUIDs included.
func checkShell(t *testing.T, d resourceapi.Device, m simnode.AlveoModel) {
	t.Helper()
	if m.Name == "" {
		t.Fatalf("device %s: the model is no simulated Alveo model", d.Name)
	}
	want := map[string]string{"platform": m.Platform, "shellTimestamp": m.Timestamp, "logicUUID": m.LogicID}
	for i, id := range m.InterfaceIDs[1:] {
		want[fmt.Sprintf("interfaceID%d", i+2)] = id
	}
	for name, v := range want {
		if got := stringAttr(t, d, name); got != v {
			t.Errorf("device %s: %s = %q, want the shell's %q", d.Name, name, got, v)
		}
	}
}

// The guarantee: every device of the template is published on a node of
// the shape under the same name, in the same order, with every template
// attribute at the same value.
func TestForShapeIsWhatTheDriverPublishes(t *testing.T) {
	for _, s := range []Shape{
		{Model: "pac-a10", Cards: 2, InterfaceID: simnode.DefaultInterfaceID},
		{Model: "pac-d5005", Cards: 4, KernelDriver: discovery.DriverOPAE, InterfaceID: otherInterfaceID, VirtualFunctions: true, Programmable: ptr.To(false)},
		{Model: "silicom-n5010", Cards: 1, InterfaceID: otherInterfaceID},
		{Model: "u250", Cards: 2, InterfaceID: simnode.U250InterfaceID},
		{Model: "u55c", Cards: 3, InterfaceID: otherInterfaceID, Programmable: ptr.To(false)},
	} {
		t.Run(s.Model, func(t *testing.T) {
			tmpl, err := ForShape(s, Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if _, err := WriteNode(dir, s); err != nil {
				t.Fatal(err)
			}
			pub := published(t, dir, s.programmable())
			if len(pub) != len(tmpl.Devices) {
				t.Fatalf("template has %d devices, the node publishes %d", len(tmpl.Devices), len(pub))
			}
			for i, d := range tmpl.Devices {
				if pub[i].Name != d.Name {
					t.Fatalf("device %d: template %s, published %s", i, d.Name, pub[i].Name)
				}
				for name, a := range d.Attributes {
					if got, ok := pub[i].Attributes[name]; !ok || !apiequality.Semantic.DeepEqual(got, a) {
						t.Errorf("device %s: %s is %v in the template, %v (present %v) on the node", d.Name, name, a, got, ok)
					}
				}
			}
		})
	}
}

func TestFromNodeKeepsBootStableAttributes(t *testing.T) {
	dir := t.TempDir()
	n, err := simnode.Write(dir, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 2})
	if err != nil {
		t.Fatal(err)
	}
	// One port is unhealthy (unusable AFU ID): it stays in the template,
	// without its health, AFU and taint.
	if err := os.WriteFile(filepath.Join(n.Cards[1].Ports[0].SysfsPath, "afu_id"), []byte(discovery.AllF+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pub := published(t, dir, true)
	tmpl, err := FromNode(dir, "", true, Options{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.Devices) != 4 || len(pub) != 4 {
		t.Fatalf("template has %d devices, the node publishes %d, want 4", len(tmpl.Devices), len(pub))
	}
	if len(pub[2].Taints) == 0 {
		t.Fatalf("the published device %s is not tainted; the test's unhealthy port is not", pub[2].Name)
	}
	for i, d := range tmpl.Devices {
		if len(d.Taints) != 0 {
			t.Errorf("device %s has taints %v", d.Name, d.Taints)
		}
		for name, a := range pub[i].Attributes {
			short := strings.TrimPrefix(string(name), v1alpha1.DriverName+"/")
			_, ok := d.Attributes[name]
			if want := !slices.Contains(runtimeOnly, short); ok != want {
				t.Errorf("device %s: attribute %s (%v) in the template: %v, want %v", d.Name, name, a, ok, want)
			}
		}
	}
	for _, s := range tmpl.ResourceSlices() {
		if s.Spec.Pool.Name != "node-a" || ptr.Deref(s.Spec.NodeName, "") != "node-a" || s.Spec.Driver != v1alpha1.DriverName {
			t.Errorf("slice pool %q node %v driver %q, want node-a, node-a, %s", s.Spec.Pool.Name, s.Spec.NodeName, s.Spec.Driver, v1alpha1.DriverName)
		}
	}
}

func TestFromNodeWithoutFPGAs(t *testing.T) {
	if _, err := FromNode(t.TempDir(), "", true, Options{}); err == nil || !strings.Contains(err.Error(), "no FPGA kernel driver") {
		t.Fatalf("err = %v, want one saying no FPGA kernel driver is loaded", err)
	}
}

// Which DeviceClass selectors work when an autoscaler simulates a node that
// does not exist yet: those on boot-stable attributes (the region's
// interface ID, the model) match the template, "this AFU is loaded" cannot.
// The scheduler's allocator stands in for the autoscaler's simulation (both
// evaluate the same CEL against the template's devices).
func TestSelectorsAtScaleUp(t *testing.T) {
	tmpl, err := ForShape(Shape{Model: "pac-a10", Cards: 2, InterfaceID: simnode.DefaultInterfaceID}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pool []*resourceapi.ResourceSlice
	for _, s := range tmpl.ResourceSlices() {
		pool = append(pool, &s)
	}
	model := fmt.Sprintf("device.attributes[%q].model.startsWith(\"Intel PAC Arria 10\")", v1alpha1.DriverName)
	for _, tc := range []struct {
		name, selector string
		match          bool
	}{
		{"every device of the driver", controller.DriverSelector(v1alpha1.DriverName), true},
		{"programmable region of the interface (FpgaRegion, AcceleratorFunction NAME-program)", controller.ProgrammableSelector(v1alpha1.DriverName, simnode.DefaultInterfaceID), true},
		{"programmable region of another interface", controller.ProgrammableSelector(v1alpha1.DriverName, otherInterfaceID), false},
		{"card model", model, true},
		{"AFU already loaded (AcceleratorFunction af mode)", controller.LoadedSelector(v1alpha1.DriverName, simnode.DefaultAFUID, ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			classes := schedulertest.Classes{"c": {
				ObjectMeta: metav1.ObjectMeta{Name: "c"},
				Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: tc.selector}}}},
			}}
			claim := &resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: "uid"},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
					Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "c", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				}}}},
			}
			result, err := schedulertest.Allocate(ctx, classes, pool, sets.New[structured.DeviceID](), DefaultNodeName, claim)
			if err != nil {
				t.Fatal(err)
			}
			if got := result != nil; got != tc.match {
				t.Errorf("selector %s matches the template: %v, want %v", tc.selector, got, tc.match)
			}
		})
	}
}

func TestKarpenterForm(t *testing.T) {
	tmpl, err := ForShape(Shape{Model: "pac-n3000", Cards: 2, InterfaceID: simnode.DefaultInterfaceID}, Options{DriverName: "fpga.example.com", NodeName: "f1"})
	if err != nil {
		t.Fatal(err)
	}
	k := tmpl.Karpenter()
	if len(k.ResourceSliceTemplates) != 1 {
		t.Fatalf("%d slice templates, want 1", len(k.ResourceSliceTemplates))
	}
	st := k.ResourceSliceTemplates[0]
	if st.Driver != "fpga.example.com" || st.Pool.Name != "f1" || len(st.Devices) != 2 {
		t.Fatalf("slice template %+v: want driver fpga.example.com, pool f1, 2 devices", st)
	}
	for i, d := range st.Devices {
		if d.Name != tmpl.Devices[i].Name {
			t.Errorf("device %d is %s, want %s", i, d.Name, tmpl.Devices[i].Name)
		}
		if a := d.Attributes["fpga.example.com/"+deviceslice.AttrInterfaceID]; a.StringValue == nil || *a.StringValue != simnode.DefaultInterfaceID {
			t.Errorf("device %s: interfaceID %v", d.Name, a.StringValue)
		}
	}
}
