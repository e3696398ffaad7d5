package draplugin

import (
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

func opaque(t *testing.T, driver string, src resourceapi.AllocationConfigSource, requests []string, afu string) resourceapi.DeviceAllocationConfiguration {
	t.Helper()
	b, err := json.Marshal(v1alpha1.FpgaConfig{AFUID: afu})
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.Replace(string(b), "{", `{"apiVersion":"fpga.dra.dev/v1alpha1","kind":"FpgaConfig",`, 1)
	return resourceapi.DeviceAllocationConfiguration{
		Source:   src,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(raw)},
		}},
	}
}

func TestConfigPrecedence(t *testing.T) {
	const (
		classAFU  = "11111111111111111111111111111111"
		claimAFU  = "22222222222222222222222222222222"
		scopedAFU = "33333333333333333333333333333333"
	)
	c := &Claims{DriverName: "fpga.dra.dev", PoolName: "node"}
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "a", Driver: "fpga.dra.dev", Pool: "node", Device: "d-a"},
				{Request: "b/fast", Driver: "fpga.dra.dev", Pool: "node", Device: "d-b"},
				{Request: "c", Driver: "fpga.dra.dev", Pool: "node", Device: "d-c"},
				{Request: "a", Driver: "gpu.example.com", Pool: "node", Device: "gpu0"},
				{Request: "a", Driver: "fpga.dra.dev", Pool: "other-node", Device: "d-x"},
			},
			// Listed claim-first on purpose: class configs still come first.
			Config: []resourceapi.DeviceAllocationConfiguration{
				opaque(t, "fpga.dra.dev", resourceapi.AllocationConfigSourceClaim, nil, claimAFU),
				opaque(t, "fpga.dra.dev", resourceapi.AllocationConfigSourceClaim, []string{"b"}, scopedAFU),
				opaque(t, "fpga.dra.dev", resourceapi.AllocationConfigSourceClass, nil, classAFU),
				opaque(t, "fpga.dra.dev", resourceapi.AllocationConfigSourceClass, []string{"c"}, classAFU),
				{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{"not":"ours"}`)}}}},
			},
		},
	}}}
	reqs, err := c.requests(claim)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range reqs {
		got[r.Device] = r.Config.AFUID
	}
	want := map[string]string{"d-a": claimAFU, "d-b": scopedAFU, "d-c": claimAFU}
	if len(got) != len(want) {
		t.Fatalf("devices %v, want only this driver's and pool's %v", got, want)
	}
	for d, afu := range want {
		if got[d] != afu {
			t.Errorf("%s gets AFU %s, want %s", d, got[d], afu)
		}
	}

}

func TestConfigInvalidNamesSourceAndField(t *testing.T) {
	c := &Claims{DriverName: "fpga.dra.dev", PoolName: "node"}
	bad := opaque(t, "fpga.dra.dev", resourceapi.AllocationConfigSourceClass, nil, "not-hex")
	claim := &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "a", Driver: "fpga.dra.dev", Pool: "node", Device: "d-a"}},
			Config:  []resourceapi.DeviceAllocationConfiguration{bad},
		},
	}}}
	_, err := c.requests(claim)
	if err == nil || !strings.Contains(err.Error(), "device class") || !strings.Contains(err.Error(), "afuID") {
		t.Fatalf("error %v should name the device class and the afuID field", err)
	}
}
