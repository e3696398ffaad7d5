package deployments_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"
)

// policyEval evaluates a ValidatingAdmissionPolicy's expressions as the
// API server's CEL environment for Kubernetes 1.37 does, on objects given
// as their JSON form: its match conditions, then its variables, then its
// validations.
type policyEval struct {
	t   *testing.T
	env *cel.Env
	vap *admissionregistrationv1.ValidatingAdmissionPolicy
}

func newPolicyEval(t *testing.T, vap *admissionregistrationv1.ValidatingAdmissionPolicy) *policyEval {
	t.Helper()
	set, err := environment.MustBaseEnvSet(version.MajorMinor(1, 37)).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
			cel.Variable("request", cel.DynType), cel.Variable("variables", cel.DynType),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := set.Env(environment.NewExpressions)
	if err != nil {
		t.Fatal(err)
	}
	return &policyEval{t: t, env: env, vap: vap}
}

func (p *policyEval) eval(expr string, vars map[string]any) ref.Val {
	p.t.Helper()
	ast, iss := p.env.Compile(expr)
	if iss.Err() != nil {
		p.t.Fatalf("compile %q: %v", expr, iss.Err())
	}
	prg, err := p.env.Program(ast)
	if err != nil {
		p.t.Fatal(err)
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		p.t.Fatalf("evaluate %q: %v", expr, err)
	}
	return out
}

// toJSON is v as the API server's CEL sees an object: its JSON form, or
// null (v nil, or a nil pointer).
func toJSON(t *testing.T, v any) any {
	t.Helper()
	if rv := reflect.ValueOf(v); v == nil || (rv.Kind() == reflect.Pointer && rv.IsNil()) {
		return types.NullValue
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// admit runs the policy on a request by user for an operation on
// oldObject and object (nil when there is none): applies is false when a
// match condition leaves the request alone; denied holds the messages of
// failed validations.
func (p *policyEval) admit(user, operation, name string, oldObject, object any) (applies bool, denied []string) {
	p.t.Helper()
	return p.admitAs(map[string]any{"username": user}, operation, name, oldObject, object)
}

// admitAs is admit by a user with more than a name (userInfo as the API
// server's CEL sees it).
func (p *policyEval) admitAs(userInfo map[string]any, operation, name string, oldObject, object any) (applies bool, denied []string) {
	p.t.Helper()
	vars := map[string]any{
		"object": toJSON(p.t, object), "oldObject": toJSON(p.t, oldObject),
		"request": map[string]any{"operation": operation, "name": name, "userInfo": userInfo},
	}
	for _, m := range p.vap.Spec.MatchConditions {
		if p.eval(m.Expression, vars) != types.True {
			return false, nil
		}
	}
	computed := map[string]any{}
	vars["variables"] = computed
	for _, v := range p.vap.Spec.Variables {
		computed[v.Name] = p.eval(v.Expression, vars)
	}
	for _, v := range p.vap.Spec.Validations {
		if p.eval(v.Expression, vars) == types.True {
			continue
		}
		msg := v.Message
		if v.MessageExpression != "" {
			msg = p.eval(v.MessageExpression, vars).Value().(string)
		}
		denied = append(denied, msg)
	}
	return true, denied
}

// wantAdmitted fails unless the policy applied, and allowed or denied the
// request (with a message) as allowed says.
func wantAdmitted(t *testing.T, applies bool, denied []string, allowed bool) {
	t.Helper()
	if !applies {
		t.Fatal("the policy does not apply to the user it is for")
	}
	if got := len(denied) == 0; got != allowed {
		t.Fatalf("allowed = %v (%v), want %v", got, denied, allowed)
	}
	for _, m := range denied {
		if m == "" {
			t.Fatal("denied without a message")
		}
	}
}

// TestDeviceClassPolicy: the controller may create, change and delete
// only the DeviceClasses an AcceleratorFunction or FpgaRegion controls;
// other users are not matched.
func TestDeviceClassPolicy(t *testing.T) {
	objs := decodeFile(t, "manifests/fpga-dra-driver.yaml")
	ns := findOne[*corev1.Namespace](t, objs, "").Name
	vap := findOne[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fpga-dra-driver-deviceclasses")
	if b := findOne[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "fpga-dra-driver-deviceclasses"); b.Spec.PolicyName != vap.Name || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
		t.Fatalf("binding %+v", b.Spec)
	}
	controller := "system:serviceaccount:" + ns + ":fpga-dra-driver-controller"
	class := func(name string, owners ...metav1.OwnerReference) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}
	}
	owner := func(apiVersion, kind string, controls bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "u", Controller: ptr.To(controls)}
	}
	af := owner("fpga.dra.dev/v1alpha1", "AcceleratorFunction", true)
	region := owner("fpga.dra.dev/v1alpha1", "FpgaRegion", true)
	p := newPolicyEval(t, vap)
	for _, tc := range []struct {
		name               string
		user               string
		op                 string
		oldClass, newClass *resourceapi.DeviceClass
		allowed            bool
	}{
		{"create a function's class", controller, "CREATE", nil, class("gzip", af), true},
		{"create a region's class", controller, "CREATE", nil, class("r-program", region), true},
		{"create a class nobody controls", controller, "CREATE", nil, class("gzip"), false},
		{"create a class whose owner does not control it", controller, "CREATE", nil, class("gzip", owner("fpga.dra.dev/v1alpha1", "AcceleratorFunction", false)), false},
		{"create a class another group's object controls", controller, "CREATE", nil, class("gpu", owner("example.com/v1", "AcceleratorFunction", true)), false},
		{"update a kept class", controller, "UPDATE", class("gzip", af), class("gzip", af), true},
		{"adopt an admin's class", controller, "UPDATE", class("gpu.example.com"), class("gpu.example.com", af), false},
		{"drop the owner of a kept class", controller, "UPDATE", class("gzip", af), class("gzip"), false},
		{"delete a kept class", controller, "DELETE", class("gzip", region), nil, true},
		{"delete the base class", controller, "DELETE", class("fpga.dra.dev"), nil, false},
		{"an admin deletes the base class", "kubernetes-admin", "DELETE", class("fpga.dra.dev"), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := ""
			for _, c := range []*resourceapi.DeviceClass{tc.oldClass, tc.newClass} {
				if c != nil {
					name = c.Name
				}
			}
			applies, denied := p.admit(tc.user, tc.op, name, tc.oldClass, tc.newClass)
			if tc.user != controller {
				if applies {
					t.Fatalf("the policy applies to %s", tc.user)
				}
				return
			}
			wantAdmitted(t, applies, denied, tc.allowed)
		})
	}
}

// TestResourceSlicePolicy: a node's driver may write only its own node's
// ResourceSlices, and only with a token that names its node.
func TestResourceSlicePolicy(t *testing.T) {
	objs := decodeFile(t, "manifests/fpga-dra-driver.yaml")
	ns := findOne[*corev1.Namespace](t, objs, "").Name
	p := newPolicyEval(t, findOne[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fpga-dra-driver-resourceslices"))
	driver := "system:serviceaccount:" + ns + ":fpga-dra-driver-kubeletplugin"
	on := func(node string) map[string]any {
		extra := map[string]any{}
		if node != "" {
			extra["authentication.kubernetes.io/node-name"] = []any{node}
		}
		return map[string]any{"username": driver, "extra": extra}
	}
	slice := func(node string) *resourceapi.ResourceSlice {
		s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
		if node != "" {
			s.Spec.NodeName = ptr.To(node)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		userInfo map[string]any
		op       string
		old, new *resourceapi.ResourceSlice
		allowed  bool
	}{
		{"create its own node's slice", on("worker-1"), "CREATE", nil, slice("worker-1"), true},
		{"create another node's slice", on("worker-1"), "CREATE", nil, slice("worker-2"), false},
		{"create a slice of no node", on("worker-1"), "CREATE", nil, slice(""), false},
		{"update its own node's slice", on("worker-1"), "UPDATE", slice("worker-1"), slice("worker-1"), true},
		{"delete another node's slice", on("worker-1"), "DELETE", slice("worker-2"), nil, false},
		{"delete its own node's slice", on("worker-1"), "DELETE", slice("worker-1"), nil, true},
		{"a token that names no node", on(""), "CREATE", nil, slice("worker-1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			applies, denied := p.admitAs(tc.userInfo, tc.op, "s", tc.old, tc.new)
			wantAdmitted(t, applies, denied, tc.allowed)
		})
	}
	if applies, _ := p.admit("system:serviceaccount:kube-system:other", "CREATE", "s", nil, slice("worker-2")); applies {
		t.Fatal("the policy applies to another user")
	}
}

// TestClaimRoutePolicy: the controller may change only a claim's routing
// label.
func TestClaimRoutePolicy(t *testing.T) {
	objs := decodeFile(t, "manifests/fpga-dra-driver.yaml")
	ns := findOne[*corev1.Namespace](t, objs, "").Name
	p := newPolicyEval(t, findOne[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fpga-dra-driver-claim-route"))
	controller := "system:serviceaccount:" + ns + ":fpga-dra-driver-controller"
	claim := func(labels map[string]string, finalizers ...string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: labels, Finalizers: finalizers}}
	}
	route := "fpga.dra.dev/node"
	for _, tc := range []struct {
		name     string
		old, new *resourceapi.ResourceClaim
		allowed  bool
	}{
		{"set the routing label", claim(map[string]string{"app": "x"}), claim(map[string]string{"app": "x", route: "worker-1"}), true},
		{"remove the routing label", claim(map[string]string{route: "worker-1"}), claim(nil), true},
		{"change another label", claim(map[string]string{"app": "x"}), claim(map[string]string{"app": "y"}), false},
		{"remove another label", claim(map[string]string{"app": "x"}), claim(nil), false},
		{"add a finalizer", claim(nil), claim(nil, "example.com/f"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			applies, denied := p.admit(controller, "UPDATE", "c", tc.old, tc.new)
			wantAdmitted(t, applies, denied, tc.allowed)
		})
	}
}
