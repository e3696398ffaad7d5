// Package deployments_test checks the checked-in deployment files offline:
// every rendered manifest and example decodes strictly against the
// Kubernetes API types (unknown or duplicate fields fail), the CRDs pass the
// API server's own CRD validation (CEL rules compile within their cost
// limits), custom resources are judged the same by the CRD schema and by the
// webhook's Go validation, and the chart's objects fit together.
package deployments_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// strict decodes every kind of the Kubernetes API, CRDs and this project's
// API, failing on unknown and duplicate fields.
var strict = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}()

// object is one decoded document of a file.
type object struct {
	where string // file#index
	obj   runtime.Object
}

// decodeFile strictly decodes every non-empty YAML document of path.
func decodeFile(t *testing.T, path string) []object {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var out []object
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: split documents: %v", path, err)
		}
		if js, err := yaml.YAMLToJSON(doc); err == nil && string(js) == "null" {
			continue
		}
		where := fmt.Sprintf("%s#%d", path, i)
		obj, gvk, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s (%v): %v", where, gvk, err)
			continue
		}
		out = append(out, object{where: where, obj: obj})
	}
	if len(out) == 0 {
		t.Errorf("%s: no object", path)
	}
	return out
}

func files(t *testing.T, pattern string) []string {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no file matches %s: %v", pattern, err)
	}
	return paths
}

// TestFilesDecodeStrictly is the schema check of every rendered manifest,
// CRD and example against the Kubernetes API types.
func TestFilesDecodeStrictly(t *testing.T) {
	for _, pattern := range []string{"manifests/*.yaml", "examples/logical-names/*.yaml", "helm/fpga-dra-driver/crds/*.yaml"} {
		for _, path := range files(t, pattern) {
			t.Run(path, func(t *testing.T) { decodeFile(t, path) })
		}
	}
}

// find returns the objects of type T in objs.
func find[T runtime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// findOne returns the only object of type T in objs named name (any name
// when empty).
func findOne[T interface {
	runtime.Object
	GetName() string
}](t *testing.T, objs []object, name string) T {
	t.Helper()
	var match []T
	for _, v := range find[T](objs) {
		if name == "" || v.GetName() == name {
			match = append(match, v)
		}
	}
	if len(match) != 1 {
		var zero T
		t.Fatalf("found %d %T named %q, want 1", len(match), zero, name)
	}
	return match[0]
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// TestRenderedChartFitsTogether checks what ties the chart's objects to
// each other and to the binaries.
func TestRenderedChartFitsTogether(t *testing.T) {
	objs := decodeFile(t, "manifests/fpga-dra-driver.yaml")
	ns := findOne[*corev1.Namespace](t, objs, "").Name

	// The base DeviceClass.
	base := findOne[*resourceapi.DeviceClass](t, objs, v1alpha1.GroupName)
	if got := base.Spec.Selectors[0].CEL.Expression; got != `device.driver == "fpga.dra.dev"` {
		t.Errorf("base DeviceClass selector = %s", got)
	}

	ds := findOne[*appsv1.DaemonSet](t, objs, "")
	checkNodeDaemon(t, ds)
	nodeSA := ds.Spec.Template.Spec.ServiceAccountName
	checkNodeAccess(t, objs, ns, nodeSA)
	checkControllerAndWebhook(t, objs, ns)
	checkRollingUpdates(t, ds)
}

// checkNodeDaemon checks the node daemon's environment, privileges,
// liveness probe and host paths.
func checkNodeDaemon(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	node := ds.Spec.Template.Spec.Containers[0]
	if e, ok := env(node, "NODE_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("DaemonSet NODE_NAME = %+v, want the pod's spec.nodeName", e)
	}
	if node.SecurityContext == nil || node.SecurityContext.Privileged == nil || !*node.SecurityContext.Privileged {
		t.Error("the node daemon is not privileged")
	}
	if live, _ := env(node, "LIVENESS_ADDRESS"); node.LivenessProbe == nil || node.LivenessProbe.GRPC == nil ||
		live.Value != fmt.Sprintf(":%d", node.LivenessProbe.GRPC.Port) {
		t.Errorf("the node daemon's gRPC liveness probe %+v does not check $LIVENESS_ADDRESS %q", node.LivenessProbe, live.Value)
	}
	var hostPaths []string
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths = append(hostPaths, v.HostPath.Path)
		}
	}
	for _, want := range []string{"/sys", "/dev", "/var/lib/kubelet/plugins/fpga.dra.dev", "/var/lib/kubelet/plugins_registry",
		"/var/lib/kubelet/device-plugins", "/var/run/cdi", "/srv/fpga/bitstreams"} {
		if !slices.Contains(hostPaths, want) {
			t.Errorf("DaemonSet host paths %v lack %s", hostPaths, want)
		}
	}
	// Not the directory of every kubelet plugin, with their sockets.
	if slices.Contains(hostPaths, "/var/lib/kubelet/plugins") {
		t.Errorf("DaemonSet host paths %v hold all of /var/lib/kubelet/plugins, want only the driver's own directory", hostPaths)
	}
	checkBitstreamCache(t, ds)
}

// checkNodeAccess checks what the node daemon's service account nodeSA in
// namespace ns may do: each node's driver writes only its own
// ResourceSlices.
func checkNodeAccess(t *testing.T, objs []object, ns, nodeSA string) {
	t.Helper()
	vap := findOne[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fpga-dra-driver-resourceslices")
	if got, want := vap.Spec.MatchConditions[0].Expression, fmt.Sprintf(`request.userInfo.username == "system:serviceaccount:%s:%s"`, ns, nodeSA); got != want {
		t.Errorf("ValidatingAdmissionPolicy matches %s, want %s", got, want)
	}
	if !strings.Contains(vap.Spec.Variables[0].Expression, "authentication.kubernetes.io/node-name") {
		t.Errorf("ValidatingAdmissionPolicy node name from %s", vap.Spec.Variables[0].Expression)
	}
	binding := findOne[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "fpga-dra-driver-resourceslices")
	if binding.Spec.PolicyName != vap.Name || !slices.Contains(binding.Spec.ValidationActions, "Deny") {
		t.Errorf("ValidatingAdmissionPolicyBinding = %+v", binding.Spec)
	}

	// The node's RBAC: granular claim-status authorization for this
	// driver; the status is updated, never patched.
	nodeRole := findOne[*rbacv1.ClusterRole](t, objs, nodeSA)
	if !allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims/driver", "associated-node:update", "fpga.dra.dev") ||
		!allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims/status", "update", "") ||
		allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims/status", "patch", "") ||
		!allows(nodeRole.Rules, "resource.k8s.io", "resourceslices", "create", "") ||
		!allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims", "get", "") ||
		!allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims", "watch", "") ||
		allows(nodeRole.Rules, "resource.k8s.io", "resourceclaims", "patch", "") {
		t.Errorf("node ClusterRole rules = %+v", nodeRole.Rules)
	}
	bound := false
	for _, b := range find[*rbacv1.ClusterRoleBinding](objs) {
		if b.RoleRef.Name == nodeRole.Name && len(b.Subjects) == 1 && b.Subjects[0].Name == nodeSA && b.Subjects[0].Namespace == ns {
			bound = true
		}
	}
	if !bound {
		t.Error("the node ClusterRole is not bound to the DaemonSet's service account")
	}
}

// checkControllerAndWebhook checks that the controller, its webhook
// Service and configuration name each other, and the controller's RBAC.
func checkControllerAndWebhook(t *testing.T, objs []object, ns string) {
	t.Helper()
	deploy := findOne[*appsv1.Deployment](t, objs, "")
	ctrl := deploy.Spec.Template.Spec.Containers[0]
	vwc := findOne[*admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "")
	svc := findOne[*corev1.Service](t, objs, "")
	for name, want := range map[string]string{
		"WEBHOOK_CONFIGURATION": vwc.Name,
		"WEBHOOK_SERVICE_NAME":  svc.Name,
		"WEBHOOK_TLS":           "self-signed",
		"DRIVER_NAME":           "fpga.dra.dev",
	} {
		if e, _ := env(ctrl, name); e.Value != want {
			t.Errorf("controller $%s = %q, want %q", name, e.Value, want)
		}
	}
	for k, v := range svc.Spec.Selector {
		if deploy.Spec.Template.Labels[k] != v {
			t.Errorf("webhook Service selects %s=%s, the controller pods have %q", k, v, deploy.Spec.Template.Labels[k])
		}
	}
	for _, w := range vwc.Webhooks {
		s := w.ClientConfig.Service
		if s == nil || s.Name != svc.Name || s.Namespace != ns || s.Path == nil || *s.Path != "/validate" {
			t.Errorf("webhook %s calls %+v", w.Name, s)
		}
	}
	if ctrl.LivenessProbe == nil || ctrl.ReadinessProbe == nil {
		t.Error("the controller has no liveness or readiness probe")
	}
	ctrlRole := findOne[*rbacv1.ClusterRole](t, objs, deploy.Spec.Template.Spec.ServiceAccountName)
	for _, want := range []struct{ group, resource, verb, name string }{
		{"resource.k8s.io", "deviceclasses", "create", ""},
		{"resource.k8s.io", "deviceclasses", "delete", ""},
		{"resource.k8s.io", "resourceslices", "watch", ""},
		{"fpga.dra.dev", "acceleratorfunctions/status", "update", ""},
		{"fpga.dra.dev", "fpgaregions/finalizers", "update", ""},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", vwc.Name},
		{"resource.k8s.io", "resourceclaims", "watch", ""},
		{"resource.k8s.io", "resourceclaims", "patch", ""},
	} {
		if !allows(ctrlRole.Rules, want.group, want.resource, want.verb, want.name) {
			t.Errorf("controller ClusterRole does not allow %s %s/%s %s", want.verb, want.group, want.resource, want.name)
		}
	}
	// Nothing beyond what the controller calls: it updates the status of
	// its custom resources (UpdateStatus), never patches it.
	for _, res := range []string{"acceleratorfunctions/status", "fpgaregions/status"} {
		if allows(ctrlRole.Rules, "fpga.dra.dev", res, "patch", "") {
			t.Errorf("controller ClusterRole allows patch fpga.dra.dev/%s, which the controller never calls", res)
		}
	}
	// Its claim patches touch only the routing label.
	route := findOne[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "fpga-dra-driver-claim-route")
	if got, want := route.Spec.MatchConditions[0].Expression, fmt.Sprintf(`request.userInfo.username == "system:serviceaccount:%s:%s"`, ns, deploy.Spec.Template.Spec.ServiceAccountName); got != want {
		t.Errorf("claim-route policy matches %s, want %s", got, want)
	}
	if !strings.Contains(route.Spec.Validations[0].Expression, `"fpga.dra.dev/node"`) {
		t.Errorf("claim-route policy does not name the routing label: %s", route.Spec.Validations[0].Expression)
	}
	if b := findOne[*admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, objs, "fpga-dra-driver-claim-route"); b.Spec.PolicyName != route.Name {
		t.Errorf("claim-route binding names policy %s", b.Spec.PolicyName)
	}
}

// checkRollingUpdates checks that the next node daemon pod starts beside
// the running one, its kubelet sockets carry its UID, and it stops within
// its grace period.
func checkRollingUpdates(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("DaemonSet update strategy %+v, want maxSurge 1, maxUnavailable 0", ds.Spec.UpdateStrategy.RollingUpdate)
	}
	daemon := ds.Spec.Template.Spec.Containers[0]
	if e, _ := env(daemon, "POD_UID"); e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("daemon $POD_UID = %+v, want the pod's metadata.uid", e)
	}
	if e, _ := env(daemon, "BINDING_CONDITIONS"); e.Value != "true" {
		t.Errorf("daemon $BINDING_CONDITIONS = %q, want true with the controller deployed", e.Value)
	}
	// A stopping daemon exits at the latest 10 s after its shutdown wait
	// (cmd/fpga-dra-driver stopLimit).
	wait, _ := env(daemon, "SHUTDOWN_WAIT")
	d, err := time.ParseDuration(wait.Value)
	if err != nil {
		t.Fatalf("daemon $SHUTDOWN_WAIT: %v", err)
	}
	if g := ds.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= d+10*time.Second {
		t.Errorf("DaemonSet terminationGracePeriodSeconds %v, want above the daemon's shutdown wait (%s) plus 10 s", g, d)
	}
}

// TestControllerStaysAvailable checks that the webhook (failurePolicy
// Fail) outlives one controller pod: two leader-elected replicas by
// default, spread over nodes, an update that starts a new replica before it
// stops an old one, and a PodDisruptionBudget over exactly the controller's
// pods that lets drains take one at a time.
func TestControllerStaysAvailable(t *testing.T) {
	for _, path := range files(t, "manifests/*.yaml") {
		t.Run(path, func(t *testing.T) {
			objs := decodeFile(t, path)
			deploy := findOne[*appsv1.Deployment](t, objs, "")
			pods := labels.Set(deploy.Spec.Template.Labels)
			if got := ptr.Deref(deploy.Spec.Replicas, 1); got != 2 {
				t.Errorf("controller replicas = %d, want 2", got)
			}
			// More than one replica reconciles only under leader election.
			if args := deploy.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--leader-elect=true") {
				t.Errorf("controller args %v lack --leader-elect=true, which more than one replica needs", args)
			}
			if s := deploy.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
				s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 ||
				s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() != 1 {
				t.Errorf("controller strategy %+v, want RollingUpdate with maxSurge 1, maxUnavailable 0", s)
			}

			// Soft anti-affinity among the controller's own pods, per node.
			spread := false
			if a := deploy.Spec.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
					sel, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
					if err == nil && w.PodAffinityTerm.TopologyKey == corev1.LabelHostname && !sel.Empty() && sel.Matches(pods) {
						spread = true
					}
				}
				if len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
					t.Error("the controller's default pod anti-affinity is required; want preferred, so replicas still schedule on fewer nodes")
				}
			}
			if !spread {
				t.Errorf("controller affinity %+v has no preferred anti-affinity on %s among its pods", deploy.Spec.Template.Spec.Affinity, corev1.LabelHostname)
			}

			// The budget selects the controller's pods and no other pod of
			// the chart.
			pdb := findOne[*policyv1.PodDisruptionBudget](t, objs, "")
			if pdb.Namespace != deploy.Namespace {
				t.Errorf("PodDisruptionBudget in namespace %q, the controller in %q", pdb.Namespace, deploy.Namespace)
			}
			sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(pods) {
				t.Errorf("PodDisruptionBudget selector %v (%v) does not match the controller pods' labels %v", pdb.Spec.Selector, err, pods)
			}
			if want, _ := metav1.LabelSelectorAsSelector(deploy.Spec.Selector); sel.String() != want.String() {
				t.Errorf("PodDisruptionBudget selects %s, the Deployment %s", sel, want)
			}
			if ds := findOne[*appsv1.DaemonSet](t, objs, ""); sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
				t.Errorf("PodDisruptionBudget selector %s matches the node daemon's pods too", sel)
			}
			if pdb.Spec.MinAvailable != nil || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget minAvailable %v, maxUnavailable %v; want maxUnavailable 1", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
			}
		})
	}
}

// checkBitstreamCache checks that the daemon's OCI bitstream cache is the
// host directory the chart creates, mounted read-write where the daemon's
// cache flag points, and that the cache's settings reach the daemon through
// the environment twins it reads.
func checkBitstreamCache(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	node := ds.Spec.Template.Spec.Containers[0]
	twin := func(flag string) string {
		e, ok := env(node, oci.EnvTwins[flag])
		if !ok {
			t.Errorf("the node daemon has no $%s (--%s)", oci.EnvTwins[flag], flag)
		}
		return e.Value
	}
	dir := twin(oci.FlagCacheDir)
	var opts oci.PullerOptions
	fs := pflag.NewFlagSet("daemon", pflag.ContinueOnError)
	opts.AddFlags(fs)
	for _, flag := range []string{oci.FlagCacheSize, oci.FlagMaxLayerSize} {
		if err := fs.Set(flag, twin(flag)); err != nil {
			t.Errorf("$%s: %v", oci.EnvTwins[flag], err)
		}
	}
	m := slices.IndexFunc(node.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
	if m < 0 || node.VolumeMounts[m].ReadOnly {
		t.Fatalf("$%s=%s is not a read-write mount of the node daemon: %+v", oci.EnvTwins[oci.FlagCacheDir], dir, node.VolumeMounts)
	}
	v := slices.IndexFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == node.VolumeMounts[m].Name })
	if v < 0 || ds.Spec.Template.Spec.Volumes[v].HostPath == nil || ds.Spec.Template.Spec.Volumes[v].HostPath.Path != "/var/lib/fpga-dra-driver/oci-cache" ||
		ptr.Deref(ds.Spec.Template.Spec.Volumes[v].HostPath.Type, "") != corev1.HostPathDirectoryOrCreate {
		t.Errorf("the bitstream cache %s is not the host directory /var/lib/fpga-dra-driver/oci-cache (DirectoryOrCreate): %+v", dir, ds.Spec.Template.Spec.Volumes)
	}
	// Registry access is opt-in: by default anonymous, HTTPS with the
	// system CAs, any registry.
	for _, flag := range []string{oci.FlagRegistryConfig, oci.FlagRegistryCAFile, oci.FlagInsecureRegistries, oci.FlagAllowedRegistries} {
		if e, ok := env(node, oci.EnvTwins[flag]); ok {
			t.Errorf("by default the node daemon gets $%s=%q", e.Name, e.Value)
		}
	}
}

// TestSimulatedManifest checks that the simulated variant reads the tree
// its init container writes, with the simulated programmer, and that the
// hook the runtime runs is where the daemon's hook spec will name it.
func TestSimulatedManifest(t *testing.T) {
	objs := decodeFile(t, "manifests/fpga-dra-driver-simulated.yaml")
	ds := findOne[*appsv1.DaemonSet](t, objs, "")
	spec := ds.Spec.Template.Spec
	inits := map[string]corev1.Container{}
	for _, c := range spec.InitContainers {
		inits[c.Name] = c
	}
	sim, ok := inits["simulate"]
	if !ok || len(inits) != 2 || sim.Args[0] != "simulate" {
		t.Fatalf("init containers = %+v, want simulate and install-hook", spec.InitContainers)
	}
	root, _ := env(spec.Containers[0], "FPGA_ROOT")
	programmer, _ := env(spec.Containers[0], "PROGRAMMER")
	if !slices.Contains(sim.Args, "--dir="+root.Value) || programmer.Value != "sim" {
		t.Errorf("FPGA_ROOT %q, PROGRAMMER %q, simulate args %v", root.Value, programmer.Value, sim.Args)
	}
	hook := inits["install-hook"]
	hookPath, _ := env(spec.Containers[0], "HOOK_PATH")
	if len(hook.VolumeMounts) != 1 || !slices.Contains(hook.Args, "--dir="+hook.VolumeMounts[0].MountPath) ||
		hookPath.Value != hook.VolumeMounts[0].MountPath+"/fpga-dra-driver" {
		t.Errorf("install-hook %v mounts %v; HOOK_PATH %q", hook.Args, hook.VolumeMounts, hookPath.Value)
	}
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == hook.VolumeMounts[0].Name })
	if i < 0 || spec.Volumes[i].HostPath == nil || spec.Volumes[i].HostPath.Path != hook.VolumeMounts[0].MountPath {
		t.Errorf("no hook volume on the host directory %s in %+v", hook.VolumeMounts[0].MountPath, spec.Volumes)
	}
}

// allows reports whether rules grant verb on group/resource (and on the
// object name, when not empty).
func allows(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// TestExamples checks that the example claims carry configs the node
// accepts and name classes the example logical names create, in the order
// the firstAvailable pattern needs.
func TestExamples(t *testing.T) {
	names := decodeFile(t, "examples/logical-names/logical-names.yaml")
	classes := map[string]bool{}
	for _, af := range find[*v1alpha1.AcceleratorFunction](names) {
		classes[af.Name] = true
		if af.Spec.Mode == v1alpha1.ModeRegion {
			classes[af.Name+v1alpha1.ProgramClassSuffix] = true
		}
	}
	for _, r := range find[*v1alpha1.FpgaRegion](names) {
		classes[r.Name] = true
	}
	for _, path := range []string{"examples/logical-names/af-claim.yaml", "examples/logical-names/region-claim.yaml", "examples/logical-names/firstavailable-template.yaml"} {
		for _, o := range decodeFile(t, path) {
			var spec *resourceapi.ResourceClaimSpec
			switch v := o.obj.(type) {
			case *resourceapi.ResourceClaim:
				spec = &v.Spec
			case *resourceapi.ResourceClaimTemplate:
				spec = &v.Spec.Spec
			default:
				continue
			}
			for _, r := range spec.Devices.Requests {
				var wanted []string
				if r.Exactly != nil {
					wanted = append(wanted, r.Exactly.DeviceClassName)
				}
				for _, s := range r.FirstAvailable {
					wanted = append(wanted, s.DeviceClassName)
				}
				for _, c := range wanted {
					if !classes[c] {
						t.Errorf("%s: request %s uses DeviceClass %s, which no example logical name creates", o.where, r.Name, c)
					}
				}
				if len(r.FirstAvailable) > 0 && (len(wanted) != 2 || wanted[1] != wanted[0]+v1alpha1.ProgramClassSuffix) {
					t.Errorf("%s: firstAvailable classes %v, want NAME before NAME-program", o.where, wanted)
				}
			}
			for i, c := range spec.Devices.Config {
				if c.Opaque == nil || c.Opaque.Driver != "fpga.dra.dev" {
					continue
				}
				if _, err := v1alpha1.DecodeAndValidate(c.Opaque.Parameters.Raw); err != nil {
					t.Errorf("%s: config %d: %v", o.where, i, err)
				}
			}
		}
	}
}
