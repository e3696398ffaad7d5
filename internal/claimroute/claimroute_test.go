package claimroute

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestValue(t *testing.T) {
	long := strings.Repeat("n", 100) + ".example.com"
	for _, node := range []string{"worker-1", long, "UPPER.case.node"} {
		v := Value(node)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("Value(%q) = %q: %v", node, v, errs)
		}
		if Value(node) != v {
			t.Errorf("Value(%q) is not stable", node)
		}
	}
	if Value(long) == Value(long+"x") {
		t.Error("two long names map to one value")
	}
}

func TestNode(t *testing.T) {
	sel := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
		{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"node-a"}},
	}}}}
	claim := func(results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{}
		c.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: sel}
		c.Status.Allocation.Devices.Results = results
		return c
	}
	cond := []string{"fpga.dra.dev/programmed"}
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		node    string
		pending bool
	}{
		{"unallocated", &resourceapi.ResourceClaim{}, "", false},
		{"ours with binding conditions", claim(resourceapi.DeviceRequestAllocationResult{Driver: "fpga.dra.dev", Pool: "node-a", BindingConditions: cond}), "node-a", true},
		{"ours without", claim(resourceapi.DeviceRequestAllocationResult{Driver: "fpga.dra.dev", Pool: "node-a"}), "", false},
		{"another driver's", claim(resourceapi.DeviceRequestAllocationResult{Driver: "gpu.example.com", Pool: "node-a", BindingConditions: cond}), "", false},
	} {
		node, pending := Node(tc.claim, "fpga.dra.dev")
		if node != tc.node || pending != tc.pending {
			t.Errorf("%s: %q %v, want %q %v", tc.name, node, pending, tc.node, tc.pending)
		}
	}
	// Without a one-node selector the pool names the node.
	c := claim(resourceapi.DeviceRequestAllocationResult{Driver: "fpga.dra.dev", Pool: "node-b", BindingConditions: cond})
	c.Status.Allocation.NodeSelector = nil
	if node, _ := Node(c, "fpga.dra.dev"); node != "node-b" {
		t.Errorf("pool fallback: %q", node)
	}
}
