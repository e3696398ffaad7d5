package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// TestTerminatingClassSpecChangeValidated: a DeviceClass held by a
// finalizer and deleted stays usable by the scheduler while it
// terminates, so a change of its spec is validated like any other.
func TestTerminatingClassSpecChangeValidated(t *testing.T) {
	h := NewHandler(driverName, nil)
	meta := `"metadata":{"name":"c","finalizers":["example.com/keep"],"deletionTimestamp":"2026-01-01T00:00:00Z"}`
	good := opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","programming":"Never"`))
	bad := opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`","programming":"Never","bitstream":"../../etc/x"`))
	cls := func(cfg string) string {
		return `{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass",` + meta + `,"spec":{"selectors":[{"cel":{"expression":"true"}}],"config":[` + cfg + `]}}`
	}
	resp := h.Review(request("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", admissionv1.Update, cls(bad), cls(good)))
	if resp.Allowed {
		t.Errorf("spec change to an invalid config admitted on a terminating DeviceClass (%s)", strings.TrimSpace(bad))
	}
}
