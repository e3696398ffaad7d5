package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

func writeInstanceTypes(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "instance-types.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAddFPGADevices(t *testing.T) {
	path := writeInstanceTypes(t, `[
  {"name": "plain-8x", "resources": {"cpu": "8"}},
  {"name": "fpga-a10-2x", "resources": {"cpu": "8"},
   "fpga": {"model": "pac-a10", "cards": 2, "interfaceID": "69528db6eb31577a8c3668f9faa081f6"}}
]`)
	plain, fpga := &cloudprovider.InstanceType{Name: "plain-8x"}, &cloudprovider.InstanceType{Name: "fpga-a10-2x"}
	if err := addFPGADevices(path, []*cloudprovider.InstanceType{plain, fpga}); err != nil {
		t.Fatal(err)
	}
	if n := len(plain.DynamicResources.ResourceSliceTemplates); n != 0 {
		t.Errorf("the instance type without a shape got %d slice templates", n)
	}
	templates := fpga.DynamicResources.ResourceSliceTemplates
	if len(templates) != 1 {
		t.Fatalf("%d slice templates, want 1", len(templates))
	}
	st := templates[0]
	if st.Driver.Value() != "fpga.dra.dev" || st.Pool.Name.Value() != "fpga-a10-2x" || len(st.Devices) != 2 {
		t.Fatalf("slice template driver %s pool %s with %d devices, want fpga.dra.dev, fpga-a10-2x, 2", st.Driver.Value(), st.Pool.Name.Value(), len(st.Devices))
	}
	for _, d := range st.Devices {
		a := d.Attributes["fpga.dra.dev/interfaceID"]
		if a.StringValue == nil || *a.StringValue != "69528db6eb31577a8c3668f9faa081f6" {
			t.Errorf("device %s: interfaceID %v", d.Name.Value(), a.StringValue)
		}
	}
}

func TestAddFPGADevicesErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`[{"name": "f1", "fpga": {"model": "u999", "cards": 1, "interfaceID": "69528db6eb31577a8c3668f9faa081f6"}}]`, `instance type "f1": fpga: model: model "u999"`},
		{`[{"name": "f1", "fpga": {"model": "pac-a10", "cards": 1}}]`, `instance type "f1": fpga: interfaceID is required`},
		{`[{"name": "f2", "fpga": {"model": "pac-a10", "cards": 1, "interfaceID": "69528db6eb31577a8c3668f9faa081f6"}}]`, `"f2" has an fpga shape but kwok did not construct it`},
		{`{}`, "cannot unmarshal"},
	} {
		err := addFPGADevices(writeInstanceTypes(t, tc.file), []*cloudprovider.InstanceType{{Name: "f1"}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.file, err, tc.want)
		}
	}
}
