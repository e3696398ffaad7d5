package draplugin

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// bindingConditionsStored reports whether the API server keeps binding
// conditions of devices (its feature DRADeviceBindingConditions is on):
// it dry-runs the creation of a slice of this node with one device that
// carries them and looks at what would be stored. Nothing is stored.
// Slices stored while the feature was on keep their binding conditions
// after it is turned off, so the published slices cannot tell.
func bindingConditionsStored(ctx context.Context, client kubernetes.Interface, driverName, nodeName string) (bool, error) {
	probe := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + "-" + driverName + "-probe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driverName,
			NodeName: &nodeName,
			Pool:     resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name:                     "probe",
				BindingConditions:        []string{qualified(driverName, ConditionProgrammed)},
				BindingFailureConditions: []string{qualified(driverName, ConditionProgrammingFailed)},
			}},
		},
	}
	out, err := client.ResourceV1().ResourceSlices().Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, fmt.Errorf("dry-run a ResourceSlice with binding conditions: %w", err)
	}
	return len(out.Spec.Devices) == 1 && len(out.Spec.Devices[0].BindingConditions) > 0, nil
}
