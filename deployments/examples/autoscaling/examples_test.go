// Package autoscaling_test checks the autoscaling examples offline: every
// document decodes strictly against the Kubernetes API types, the node
// template is what `fpga-dra-driver template` prints today, and the example
// workload's claim is allocatable, or not, from the devices each autoscaler
// path simulates, as README.md says.
package autoscaling_test

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/controller"
	"github.com/fpga-dra/fpga-dra-driver/internal/schedulertest"
	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
)

var update = flag.Bool("update", false, "rewrite fpga-node-template.yaml from the template package")

const (
	driverName   = v1alpha1.DriverName
	templateFile = "fpga-node-template.yaml"
)

// decode strictly decodes every YAML document of path (unknown or
// duplicate fields fail).
func decode(t *testing.T, path string) []runtime.Object {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		out = append(out, obj)
	}
	return out
}

func only[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

// nodeTemplate is what `fpga-dra-driver template --model pac-a10 --cards 2
// --interface-id ...` prints.
func nodeTemplate(t *testing.T) []byte {
	t.Helper()
	tmpl, err := slicetemplate.ForShape(slicetemplate.Shape{Model: "pac-a10", Cards: 2, InterfaceID: simnode.DefaultInterfaceID}, slicetemplate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": tmpl.ResourceSlices()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitComment returns the leading comment lines of a file and the rest.
func splitComment(b []byte) (comment, body []byte) {
	for len(b) > 0 && b[0] == '#' {
		i := bytes.IndexByte(b, '\n')
		comment, b = append(comment, b[:i+1]...), b[i+1:]
	}
	return comment, b
}

func TestNodeTemplateIsCurrent(t *testing.T) {
	raw, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	comment, body := splitComment(raw)
	want := nodeTemplate(t)
	if *update {
		if err := os.WriteFile(templateFile, append(comment, want...), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(body, want) {
		t.Errorf("%s is stale: regenerate it (go test ./deployments/examples/autoscaling -update); want:\n%s", templateFile, want)
	}
}

func templateSlices(t *testing.T) []*resourceapi.ResourceSlice {
	t.Helper()
	raw, err := os.ReadFile(templateFile)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		metav1.TypeMeta `json:",inline"`
		Items           []*resourceapi.ResourceSlice `json:"items"`
	}
	if err := yaml.UnmarshalStrict(raw, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// runningNodeSlices is the slice a running node of the group publishes:
// what Cluster Autoscaler copies into the group's template, runtime
// attributes (the loaded AFU, health) included.
func runningNodeSlices(t *testing.T) []*resourceapi.ResourceSlice {
	t.Helper()
	dir := t.TempDir()
	if _, err := simnode.Write(dir, simnode.Options{Driver: discovery.DriverDFL, Cards: 2, PortsPerCard: 1}); err != nil {
		t.Fatal(err)
	}
	res, err := (&discovery.Scanner{Root: dir}).Scan()
	if err != nil {
		t.Fatal(err)
	}
	devices := deviceslice.Devices(res, deviceslice.Options{DriverName: driverName, Programmable: true, Root: dir})
	var out []*resourceapi.ResourceSlice
	for _, s := range deviceslice.SliceObjects(driverName, "fpga-1", deviceslice.Resources("fpga-1", devices)) {
		out = append(out, &s)
	}
	return out
}

// countStyleSlices is what Cluster API's capacity annotations
// (dra-driver, gpu-count) give a node group from zero: devices of the
// driver without attributes.
func countStyleSlices() []*resourceapi.ResourceSlice {
	return []*resourceapi.ResourceSlice{{
		ObjectMeta: metav1.ObjectMeta{Name: "template"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driverName, NodeName: ptr.To("fpga-template-node"),
			Pool:    resourceapi.ResourcePool{Name: "fpga-template-node", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "device-0"}, {Name: "device-1"}},
		},
	}}
}

// allocates reports whether one request of class is allocatable from
// slices by the scheduler's allocator (the one Cluster Autoscaler runs;
// Karpenter evaluates the same CEL).
func allocates(t *testing.T, class *resourceapi.DeviceClass, slices []*resourceapi.ResourceSlice) bool {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	node := ptr.Deref(slices[0].Spec.NodeName, "")
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default", UID: "uid"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
	result, err := schedulertest.Allocate(ctx, schedulertest.Classes{class.Name: class}, slices, sets.New[structured.DeviceID](), node, claim)
	if err != nil {
		t.Fatal(err)
	}
	return result != nil
}

func class(name, expression string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expression}}}},
	}
}

func TestWorkload(t *testing.T) {
	objs := decode(t, "fpga-workload.yaml")
	regionClass := only[*resourceapi.DeviceClass](t, objs)
	if got, want := regionClass.Spec.Selectors[0].CEL.Expression, controller.ProgrammableSelector(driverName, simnode.DefaultInterfaceID); got != want {
		t.Errorf("the example class selects %s, the FpgaRegion's class %s", got, want)
	}
	tmpl := only[*resourceapi.ResourceClaimTemplate](t, objs)
	if r := tmpl.Spec.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.DeviceClassName != regionClass.Name {
		t.Fatalf("the claim template's requests %+v do not ask for one device of %s", r, regionClass.Name)
	}
	if _, err := v1alpha1.DecodeAndValidate(tmpl.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw); err != nil {
		t.Errorf("the claim template's FpgaConfig: %v", err)
	}
	deploy := only[*appsv1.Deployment](t, objs)
	if c := deploy.Spec.Template.Spec.ResourceClaims; len(c) != 1 || ptr.Deref(c[0].ResourceClaimTemplateName, "") != tmpl.Name {
		t.Errorf("the Deployment's claims %+v do not use the template %s", c, tmpl.Name)
	}

	afLoaded := class("nlb0", controller.LoadedSelector(driverName, simnode.DefaultAFUID, ""))
	anyFPGA := class(driverName, controller.DriverSelector(driverName))
	for _, tc := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		class  *resourceapi.DeviceClass
		want   bool
	}{
		{"from zero: the node template", templateSlices(t), regionClass, true},
		{"from zero: the node template, AFU already loaded", templateSlices(t), afLoaded, false},
		{"copied from a running node", runningNodeSlices(t), regionClass, true},
		// The copy carries the running node's loaded AFU, which a new
		// node does not have: the autoscaler would add a node the claim
		// cannot use. README.md says to use boot-stable classes.
		{"copied from a running node, AFU already loaded", runningNodeSlices(t), afLoaded, true},
		{"Cluster API count-style devices", countStyleSlices(), regionClass, false},
		{"Cluster API count-style devices, any device of the driver", countStyleSlices(), anyFPGA, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allocates(t, tc.class, tc.slices); got != tc.want {
				t.Errorf("class %s allocatable: %v, want %v", tc.class.Name, got, tc.want)
			}
		})
	}
}

func TestClusterAutoscaler(t *testing.T) {
	objs := decode(t, "cluster-autoscaler.yaml")
	deploy := only[*appsv1.Deployment](t, objs)
	args := deploy.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--enable-dynamic-resource-allocation=true") {
		t.Errorf("args %v lack --enable-dynamic-resource-allocation=true", args)
	}
	role := only[*rbacv1.ClusterRole](t, objs)
	for _, resource := range []string{"resourceslices", "resourceclaims", "deviceclasses"} {
		for _, verb := range []string{"get", "list", "watch"} {
			if !allows(role.Rules, "resource.k8s.io", resource, verb) {
				t.Errorf("the ClusterRole does not allow %s on resource.k8s.io %s", verb, resource)
			}
		}
	}
	binding := only[*rbacv1.ClusterRoleBinding](t, objs)
	sa := only[*corev1.ServiceAccount](t, objs)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace ||
		deploy.Spec.Template.Spec.ServiceAccountName != sa.Name || deploy.Namespace != sa.Namespace {
		t.Errorf("the binding %+v does not bind role %s to the Deployment's service account %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--cloud-provider=") && a != "--cloud-provider=clusterapi" {
			t.Errorf("%s: README.md describes the Cluster API provider", a)
		}
	}
}

func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			return true
		}
	}
	return false
}
