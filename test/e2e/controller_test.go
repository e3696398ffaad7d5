package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
	"github.com/fpga-dra/fpga-dra-driver/internal/webhook"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// Test8AcceleratorFunctionFirstAvailable: an AcceleratorFunction becomes
// DeviceClasses, and a firstAvailable template lands on a port where the
// function is loaded before it would program a region.
func Test8AcceleratorFunctionFirstAvailable(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	afs := createAcceleratorFunction(t, ctx)
	ns := namespace(t, "e2e-controller")
	checkFirstAvailableLoaded(t, ctx, ns)
	checkExtendedResourcePod(t, ctx, ns)
	checkAcceleratorFunctionLifecycle(t, ctx, afs)
}

// createAcceleratorFunction starts the controller unless the chart runs it,
// creates AcceleratorFunction nlb0 and waits for its two DeviceClasses.
func createAcceleratorFunction(t *testing.T, ctx context.Context) dynamic.ResourceInterface {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// From the chart the controller runs as a Deployment already.
	if !node.FromChart() {
		ctrl, err := cluster.StartController(ctx, filepath.Join(repo, "deployments/helm/fpga-dra-driver/crds"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctrl.Stop(10 * time.Second) })
	}
	af := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "AcceleratorFunction",
		"metadata": map[string]any{"name": "nlb0"},
		"spec": map[string]any{
			"afuID": simnode.DefaultAFUID, "interfaceID": simnode.DefaultInterfaceID, "mode": "region",
			"description": "e2e: loaded on cards 1, 3 (and a hot-plugged 5)",
		},
	}}
	afs := acceleratorFunctions(t)
	if _, err := afs.Create(ctx, af, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = afs.Delete(context.Background(), "nlb0", metav1.DeleteOptions{}) })
	eventually(t, "DeviceClasses nlb0 and nlb0-program", 60*time.Second, func() bool {
		for _, n := range []string{"nlb0", "nlb0-program"} {
			if _, err := cluster.Client.ResourceV1().DeviceClasses().Get(ctx, n, metav1.GetOptions{}); err != nil {
				return false
			}
		}
		return true
	})
	return afs
}

// checkFirstAvailableLoaded runs a probe pod whose claim lists a loaded port
// before a programmable one and checks it gets the loaded port unprogrammed.
func checkFirstAvailableLoaded(t *testing.T, ctx context.Context, ns string) {
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nlb0"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fpga", FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "loaded", DeviceClassName: "nlb0", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				{Name: "program", DeviceClassName: "nlb0-program", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
			}}},
		}}},
	}
	if _, err := cluster.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probePod(t, ns, "worker", "nlb0")
	view, device, claim := runningProbe(t, ns, "worker")
	var request string
	for _, r := range claim.Status.Allocation.Devices.Results {
		request = r.Request
	}
	if request != "fpga/loaded" {
		t.Fatalf("allocated through %q, want fpga/loaded while a loaded port is free (device %s)", request, device)
	}
	if view.Env["FPGA_AFU_IDS"] != simnode.DefaultAFUID {
		t.Fatalf("container sees AFU %q, want %s", view.Env["FPGA_AFU_IDS"], simnode.DefaultAFUID)
	}
	if n := programmedEvents(t, claim); n != 0 {
		t.Fatalf("a loaded function was programmed %d times", n)
	}
}

// checkExtendedResourcePod runs a pod asking for the function's extended
// resource and checks the class serves it through DRA.
func checkExtendedResourcePod(t *testing.T, ctx context.Context, ns string) {
	// A pod spec written for the device plugin asks for the function's
	// extended resource; the class serves it through DRA.
	resource, err := extresource.AFName(simnode.DefaultInterfaceID, simnode.DefaultAFUID)
	if err != nil {
		t.Fatal(err)
	}
	resource = driverName + "/" + resource
	eventually(t, "DeviceClass nlb0 serves "+resource, 60*time.Second, func() bool {
		dc, err := cluster.Client.ResourceV1().DeviceClasses().Get(ctx, "nlb0", metav1.GetOptions{})
		return err == nil && dc.Spec.ExtendedResourceName != nil && *dc.Spec.ExtendedResourceName == resource
	})
	running, legacyView := runResourcePod(t, ns, "legacy-spec", resource)
	if st := running.Status.ExtendedResourceClaimStatus; st == nil || st.ResourceClaimName == "" {
		t.Fatalf("pod asking for %s runs without a DRA claim: %+v", resource, running.Status)
	}
	if devs := fpgaDevices(legacyView); len(devs) != 1 || legacyView.Env["FPGA_AFU_IDS"] != simnode.DefaultAFUID {
		t.Fatalf("pod asking for %s sees devices %v and AFU %q, want one port with %s", resource, devs, legacyView.Env["FPGA_AFU_IDS"], simnode.DefaultAFUID)
	}
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, running.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkAcceleratorFunctionLifecycle checks nlb0's status counts devices, an
// update reaches its DeviceClass and deleting it removes its classes.
func checkAcceleratorFunctionLifecycle(t *testing.T, ctx context.Context, afs dynamic.ResourceInterface) {
	eventually(t, "AcceleratorFunction status counts devices", 60*time.Second, func() bool {
		got, err := afs.Get(ctx, "nlb0", metav1.GetOptions{})
		if err != nil {
			return false
		}
		loaded, _, _ := unstructured.NestedInt64(got.Object, "status", "loadedDevices")
		return loaded > 0
	})

	// An update reaches the DeviceClass.
	got, err := afs.Get(ctx, "nlb0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(got.Object, simnode.SecondAFUID, "spec", "afuID"); err != nil {
		t.Fatal(err)
	}
	if _, err := afs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DeviceClass nlb0 selects the new AFU", 60*time.Second, func() bool {
		dc, err := cluster.Client.ResourceV1().DeviceClasses().Get(ctx, "nlb0", metav1.GetOptions{})
		return err == nil && len(dc.Spec.Selectors) > 0 && dc.Spec.Selectors[0].CEL != nil &&
			strings.Contains(dc.Spec.Selectors[0].CEL.Expression, simnode.SecondAFUID)
	})
	// Deleting it removes its classes (owner references).
	if err := afs.Delete(ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DeviceClasses removed with their AcceleratorFunction", 60*time.Second, func() bool {
		for _, n := range []string{"nlb0", "nlb0-program"} {
			if _, err := cluster.Client.ResourceV1().DeviceClasses().Get(ctx, n, metav1.GetOptions{}); err == nil {
				return false
			}
		}
		return true
	})
}

// acceleratorFunctions is a client of the cluster's AcceleratorFunctions.
func acceleratorFunctions(t testing.TB) dynamic.ResourceInterface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", cluster.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(v1alpha1.SchemeGroupVersion.WithResource("acceleratorfunctions"))
}

// Test9Webhook: the API server calls the controller's validating webhook
// for claims that configure this driver; a bad FpgaConfig is refused at
// creation with its field path, a good one and other drivers' claims pass.
// The controller serving the webhook runs as a host process: this cluster
// has no kube-proxy, so the API server cannot reach an in-cluster webhook
// Service.
func Test9Webhook(t *testing.T) {
	requireCluster(t)
	startWebhook(t)
	ns := namespace(t, "e2e-webhook")
	claim := func(name, driver, params string) error { return createConfiguredClaim(ns, name, driver, params) }
	if err := claim("bad", driverName, badAFUConfig); err == nil || !strings.Contains(err.Error(), "spec.devices.config[0].opaque.parameters.afuID") {
		t.Fatalf("refusal %v does not name the field path", err)
	}
	if err := claim("unknown-field", driverName, `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"`+simnode.SampleAFUID+`","programing":"Always"}`); err == nil || !strings.Contains(err.Error(), "programing") {
		t.Fatalf("a misspelt field: %v, want a refusal naming it", err)
	}
	if err := claim("good", driverName, `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"`+simnode.SampleAFUID+`"}`); err != nil {
		t.Fatalf("a valid config was refused: %v", err)
	}
	if err := claim("other-driver", "gpu.example.com", `{"whatever":true}`); err != nil {
		t.Fatalf("another driver's claim was refused: %v", err)
	}
}

// badAFUConfig is an FpgaConfig the webhook denies.
const badAFUConfig = `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig","afuID":"not-an-id"}`

// startWebhook runs fpga-dra-controller with its validating webhook as a
// host process and registers the webhook with the API server for
// ResourceClaims that configure this driver, both until the test ends. It
// returns once the API server denies a bad config: from then on every
// claim passes the webhook.
func startWebhook(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caPEM, err := cluster.IssueServingCert("webhook", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	ctrl, err := cluster.StartController(ctx, filepath.Join(repo, "deployments/helm/fpga-dra-driver/crds"),
		"--webhook=true", "--webhook-tls=files", "--webhook-cert-file", certFile, "--webhook-key-file", keyFile, "--webhook-address", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Stop(10 * time.Second) })
	eventually(t, "webhook listening", 30*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := "https://" + addr + webhook.ValidatePath
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fpga-dra-e2e"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "resourceclaims.fpga.dra.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"resourceclaims"}},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "configures-fpga-dra-dev",
				Expression: `has(object.spec.devices) && has(object.spec.devices.config) && object.spec.devices.config.exists(c, has(c.opaque) && c.opaque.driver == "fpga.dra.dev")`,
			}},
		}},
	}
	if _, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), cfg.Name, metav1.DeleteOptions{})
	})
	// The API server takes the configuration up after a moment; until
	// then claims pass unchecked (a probe that passed is deleted).
	eventually(t, "the API server consults the webhook", 30*time.Second, func() bool {
		err := createConfiguredClaim(metav1.NamespaceDefault, "e2e-webhook-probe", driverName, badAFUConfig)
		if err == nil {
			_ = cluster.Client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Delete(ctx, "e2e-webhook-probe", metav1.DeleteOptions{})
		}
		return err != nil && strings.Contains(err.Error(), "denied")
	})
}

// createConfiguredClaim creates a ResourceClaim in ns asking for one device
// of the base class, with an opaque config for driver.
func createConfiguredClaim(ns, name, driver, params string) error {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fpga", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "fpga.dra.dev"}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}},
			}}},
		}},
	}
	_, err := cluster.Client.ResourceV1().ResourceClaims(ns).Create(context.Background(), c, metav1.CreateOptions{})
	return err
}
