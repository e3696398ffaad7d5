package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// request is an admission request of an object (and its old version
// when old is not empty).
func request(group, version, resource, kind string, op admissionv1.Operation, object, old string) *admissionv1.AdmissionRequest {
	r := &admissionv1.AdmissionRequest{
		UID:       "u",
		Kind:      metav1.GroupVersionKind{Group: group, Version: version, Kind: kind},
		Resource:  metav1.GroupVersionResource{Group: group, Version: version, Resource: resource},
		Name:      "obj",
		Operation: op,
		Object:    runtime.RawExtension{Raw: []byte(object)},
	}
	if old != "" {
		r.OldObject = runtime.RawExtension{Raw: []byte(old)}
	}
	return r
}

// TestDeviceClassConfigIsValidated: an admin's DeviceClass with an
// FpgaConfig the node rejects is refused at admission, not at every
// prepare of its claims.
func TestDeviceClassConfigIsValidated(t *testing.T) {
	h := NewHandler(driverName, nil)
	class := `{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"nlb0-fast"},"spec":{` +
		`"selectors":[{"cel":{"expression":"device.driver == \"fpga.dra.dev\""}}],` +
		`"config":[` + opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","programming":"Never","bitstream":"../nlb0.gbs"`)) + `]}}`
	resp := h.Review(request("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", admissionv1.Create, class, ""))
	if resp.Allowed {
		t.Errorf("DeviceClass with FpgaConfig {programming: Never, bitstream: ../nlb0.gbs} admitted (warnings %v); the node rejects it at every prepare", resp.Warnings)
	}
}

// TestMetadataOnlyUpdateAllowed: a metadata-only UPDATE (a finalizer or
// label change; the garbage collector removing foregroundDeletion) of an
// object whose spec holds a config a newer or stricter webhook rejects is
// allowed: the object can be relabelled and finish deleting.
func TestMetadataOnlyUpdateAllowed(t *testing.T) {
	h := NewHandler(driverName, nil)
	bad := opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","programming":"Never","sha256":"`+strings.Repeat("a", 64)+`"`))
	spec := `"spec":{"spec":` + claimSpecJSON(bad) + `}`
	old := `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t","namespace":"default","finalizers":["foregroundDeletion"],"deletionTimestamp":"2026-01-01T00:00:00Z"},` + spec + `}`
	updated := `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaimTemplate","metadata":{"name":"t","namespace":"default","deletionTimestamp":"2026-01-01T00:00:00Z"},` + spec + `}`
	resp := h.Review(request("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", admissionv1.Update, updated, old))
	if !resp.Allowed {
		t.Errorf("finalizer removal from a template being deleted denied: %s", resp.Result.Message)
	}

	afOld := `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"AcceleratorFunction","metadata":{"name":"nlb0","finalizers":["orphan"],"deletionTimestamp":"2026-01-01T00:00:00Z"},"spec":{"afuID":"` + afuID + `","interfaceID":"` + ifID + `","mode":"region","bitstream":"nlb0\u0007.gbs"}}`
	afNew := strings.Replace(afOld, `"finalizers":["orphan"],`, "", 1)
	resp = h.Review(request("fpga.dra.dev", "v1alpha1", "acceleratorfunctions", "AcceleratorFunction", admissionv1.Update, afNew, afOld))
	if !resp.Allowed {
		t.Errorf("finalizer removal from an AcceleratorFunction being deleted denied: %s", resp.Result.Message)
	}
}

// TestUnknownFieldNamesTheFix: the error for a misspelt field names the
// fix: afuId and interfaceId are the spellings of the Intel FPGA
// webhook's CRDs (fpga.intel.com/v2) that users migrate from.
func TestUnknownFieldNamesTheFix(t *testing.T) {
	h := NewHandler(driverName, nil)
	resp := h.Review(request("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
		claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuId":"`+afuID+`"`))), ""))
	if resp.Allowed {
		t.Fatal("admitted")
	}
	if msg := resp.Result.Message; !strings.Contains(msg, `afuID`) {
		t.Errorf("message %q does not name the fix (the field is spelt afuID)", msg)
	}
}
