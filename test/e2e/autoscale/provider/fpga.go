package main

import (
	"encoding/json"
	"fmt"
	"os"
	"unique"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/fpga-dra/fpga-dra-driver/pkg/slicetemplate"
)

// instanceTypeShape is the part of a kwok instance-types entry this
// provider reads; kwok reads the rest and ignores "fpga".
type instanceTypeShape struct {
	Name string          `json:"name"`
	FPGA json.RawMessage `json:"fpga"`
}

// addFPGADevices sets DynamicResources on every instance type whose entry
// in the instance-types file at path has an "fpga" shape: the template of
// that shape, its pool named after the instance type. An empty path (kwok's
// built-in instance types) adds nothing.
func addFPGADevices(path string, instanceTypes []*cloudprovider.InstanceType) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var entries []instanceTypeShape
	if err := json.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	byName := map[string]*cloudprovider.InstanceType{}
	for _, it := range instanceTypes {
		byName[it.Name] = it
	}
	for _, e := range entries {
		if len(e.FPGA) == 0 {
			continue
		}
		shape, err := slicetemplate.ParseShape(e.FPGA)
		if err != nil {
			return fmt.Errorf("%s: instance type %q: fpga: %w", path, e.Name, err)
		}
		t, err := slicetemplate.ForShape(shape, slicetemplate.Options{NodeName: e.Name})
		if err != nil {
			return fmt.Errorf("%s: instance type %q: %w", path, e.Name, err)
		}
		it, ok := byName[e.Name]
		if !ok {
			return fmt.Errorf("%s: instance type %q has an fpga shape but kwok did not construct it", path, e.Name)
		}
		it.DynamicResources = dynamicResources(t.Karpenter())
	}
	return nil
}

// dynamicResources copies the JSON form of Karpenter's DynamicResources
// into Karpenter's own type.
func dynamicResources(k slicetemplate.DynamicResources) cloudprovider.DynamicResources {
	var out cloudprovider.DynamicResources
	for _, st := range k.ResourceSliceTemplates {
		t := &cloudprovider.ResourceSliceTemplate{
			Driver: unique.Make(st.Driver),
			Pool:   cloudprovider.ResourcePool{Name: unique.Make(st.Pool.Name)},
		}
		for _, d := range st.Devices {
			t.Devices = append(t.Devices, cloudprovider.Device{Name: unique.Make(d.Name), Attributes: d.Attributes})
		}
		out.ResourceSliceTemplates = append(out.ResourceSliceTemplates, t)
	}
	return out
}
