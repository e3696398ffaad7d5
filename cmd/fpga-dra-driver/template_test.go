package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/fpga-dra/fpga-dra-driver/pkg/deviceslice"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
)

// TestTemplateForAModel: the ResourceSlice manifest and Karpenter's form of
// one template hold the same devices, without the loaded AFU.
func TestTemplateForAModel(t *testing.T) {
	args := []string{"template", "--model", "pac-a10", "--cards", "2", "--interface-id", simnode.DefaultInterfaceID, "--node-name", "f1-node"}
	out, err := execute(t, newRootCommand(), args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var list resourceapi.ResourceSliceList
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(list.Items) != 1 || len(list.Items[0].Spec.Devices) != 2 || list.Items[0].Spec.Pool.Name != "f1-node" {
		t.Fatalf("want one slice of pool f1-node with 2 devices:\n%s", out)
	}
	out, err = execute(t, newRootCommand(), append(args, "-o", "karpenter")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var k slicetemplate.DynamicResources
	if err := json.Unmarshal([]byte(out), &k); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(k.ResourceSliceTemplates) != 1 || len(k.ResourceSliceTemplates[0].Devices) != 2 {
		t.Fatalf("want one slice template with 2 devices:\n%s", out)
	}
	for i, d := range k.ResourceSliceTemplates[0].Devices {
		if d.Name != list.Items[0].Spec.Devices[i].Name {
			t.Errorf("device %d: %s in Karpenter's form, %s in the manifest", i, d.Name, list.Items[0].Spec.Devices[i].Name)
		}
		if _, ok := d.Attributes["fpga.dra.dev/"+deviceslice.AttrAFUID]; ok {
			t.Errorf("device %s carries the runtime-only afuID", d.Name)
		}
	}
}

func TestTemplateFromASimulatedNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	if out, err := execute(t, newRootCommand(), "simulate", "--dir", dir, "--cards", "3"); err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	out, err := execute(t, newRootCommand(), "template", "--root", dir, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var list resourceapi.ResourceSliceList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(list.Items) != 1 || len(list.Items[0].Spec.Devices) != 3 {
		t.Fatalf("want one slice with 3 devices:\n%s", out)
	}
	for _, d := range list.Items[0].Spec.Devices {
		if _, ok := d.Attributes["fpga.dra.dev/"+deviceslice.AttrNUMANode]; !ok {
			t.Errorf("device %s lost numaNode, which a node knows from boot on", d.Name)
		}
		if _, ok := d.Attributes["fpga.dra.dev/"+deviceslice.AttrHealthy]; ok {
			t.Errorf("device %s carries the runtime-only healthy", d.Name)
		}
	}
}

func TestTemplateUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"template"}, "give --model (one of pac-a10"},
		{[]string{"template", "--model", "pac-a10", "--root", "/"}, "exclude each other"},
		{[]string{"template", "--model", "pac-a10"}, "interfaceID is required"},
		{[]string{"template", "--model", "pac-a10", "--interface-id", simnode.DefaultInterfaceID, "-o", "table"}, `-o "table"`},
		{[]string{"template", "--model", "pac-a10", "--interface-id", simnode.DefaultInterfaceID, "--kernel-driver", "xrt"}, `kernelDriver "xrt"`},
	} {
		if out, err := execute(t, newRootCommand(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want one containing %q\n%s", tc.args, err, tc.want, out)
		}
	}
}
