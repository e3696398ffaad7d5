package controller

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// classResult is what reconciling an object's DeviceClasses came to.
type classResult struct {
	// invalid is the aggregate of the spec's validation errors, if any.
	invalid error
	applied applied
	// err is the first error writing the classes.
	err error
	// names are the classes the object asks for.
	names []string
}

// readyCondition is the Ready condition for r.
func readyCondition(generation int64, kind string, r classResult) metav1.Condition {
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	switch {
	case r.invalid != nil:
		cond.Reason = v1alpha1.ReasonInvalidSpec
		cond.Message = fmt.Sprintf("no DeviceClass is kept for an invalid %s: %v", kind, r.invalid)
	case len(r.applied.conflicts) > 0:
		cond.Reason = v1alpha1.ReasonDeviceClassConflict
		cond.Message = fmt.Sprintf("DeviceClass %s exists and is not controlled by this %s: delete that class or rename this object",
			strings.Join(r.applied.conflicts, ", "), kind)
	case r.err != nil:
		cond.Reason = v1alpha1.ReasonDeviceClassError
		cond.Message = fmt.Sprintf("%v (retrying)", r.err)
	default:
		cond.Status = metav1.ConditionTrue
		cond.Reason = v1alpha1.ReasonDeviceClassesReady
		cond.Message = fmt.Sprintf("DeviceClass %s up to date", strings.Join(r.names, ", "))
	}
	return cond
}

// devicesCondition is the DevicesAvailable condition for n matching devices;
// none says what matching means when there is none.
func devicesCondition(generation int64, n int32, none string) metav1.Condition {
	if n > 0 {
		return metav1.Condition{Type: v1alpha1.ConditionDevicesAvailable, Status: metav1.ConditionTrue, ObservedGeneration: generation,
			Reason: v1alpha1.ReasonDevicesFound, Message: fmt.Sprintf("%d untainted matching devices are published", n)}
	}
	return metav1.Condition{Type: v1alpha1.ConditionDevicesAvailable, Status: metav1.ConditionFalse, ObservedGeneration: generation,
		Reason: v1alpha1.ReasonNoDevices, Message: none}
}

// fromUnstructured converts an object from a dynamic informer into out.
func fromUnstructured(obj runtime.Object, out any) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("informer returned %T, want *unstructured.Unstructured", obj)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return fmt.Errorf("convert %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// writeStatus writes obj's status through the status subresource. An object
// deleted meanwhile is no error; a conflict is (the newer object is
// reconciled again anyway).
func (c *Controller) writeStatus(ctx context.Context, kind string, obj runtime.Object) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return fmt.Errorf("convert %s status: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: content}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind(kind)
	_, err = c.dynamic.Resource(resourceOf(kind)).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update the status of %s %s: %w", kind, u.GetName(), err)
	}
	return nil
}
