package controller

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestRunFollowsEvents runs the controller with its workers and checks that
// changes of every watched kind reach the DeviceClasses and the status.
func TestRunFollowsEvents(t *testing.T) {
	n, res := simulatedNode(t, simnode.Options{Cards: 2, PortsPerCard: 2})
	tc := newTestController(t, nil)
	ctx, cancel := context.WithCancel(tc.ctx)
	done := make(chan error, 1)
	go func() { done <- tc.Run(ctx, 2) }()

	af := acceleratorFunction("nlb0", v1alpha1.AcceleratorFunctionSpec{AFUID: testAFUID, InterfaceID: testIfID, Mode: v1alpha1.ModeRegion})
	tc.putAF(t, af)
	eventually(t, "the classes and a Ready status", func() bool {
		if !cmp.Equal(tc.classNames(t), []string{"nlb0", "nlb0-program"}) {
			return false
		}
		return meta.IsStatusConditionTrue(tc.getAF(t, "nlb0").Status.Conditions, v1alpha1.ConditionReady)
	})

	// Published slices change the counts.
	for _, s := range publishedSlices(t, n, res, testNode, true) {
		if _, err := tc.kube.ResourceV1().ResourceSlices().Create(tc.ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the device counts", func() bool {
		s := tc.getAF(t, "nlb0").Status
		return s.LoadedDevices == int32(len(portsWith(res, testAFUID))) && s.ProgrammableDevices == int32(len(portsWith(res, "")))
	})

	// A class deleted by hand comes back.
	if err := tc.kube.ResourceV1().DeviceClasses().Delete(tc.ctx, "nlb0-program", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted class to be re-created", func() bool {
		return cmp.Equal(tc.classNames(t), []string{"nlb0", "nlb0-program"})
	})

	// An FpgaRegion gets its class too.
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fpgaRegion("pac-a10", testIfID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.dyn.Resource(v1alpha1.FpgaRegionsResource).Create(tc.ctx, &unstructured.Unstructured{Object: content}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the region's class", func() bool {
		return cmp.Equal(tc.classNames(t), []string{"nlb0", "nlb0-program", "pac-a10"})
	})

	// Deleting the objects deletes their classes.
	if err := tc.dyn.Resource(v1alpha1.AcceleratorFunctionsResource).Delete(tc.ctx, "nlb0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tc.dyn.Resource(v1alpha1.FpgaRegionsResource).Delete(tc.ctx, "pac-a10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no class left", func() bool { return len(tc.classNames(t)) == 0 })

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() error = %v", err)
	}
}
