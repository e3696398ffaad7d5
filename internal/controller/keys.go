package controller

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// key names one object the controller reconciles: an AcceleratorFunction or
// an FpgaRegion.
type key struct {
	kind string // v1alpha1.AcceleratorFunctionKind or v1alpha1.FpgaRegionKind
	name string
}

func (k key) String() string { return k.kind + "/" + k.name }

// ownerIndex indexes DeviceClasses by the key of their controlling
// AcceleratorFunction or FpgaRegion, so the classes of a deleted object can
// be found.
const ownerIndex = "owner"

// ownerKey returns the key of the AcceleratorFunction or FpgaRegion that
// controls class, if any.
func ownerKey(class *resourceapi.DeviceClass) (key, bool) {
	ref := metav1.GetControllerOfNoCopy(class)
	if ref == nil {
		return key{}, false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != v1alpha1.GroupName {
		return key{}, false
	}
	switch ref.Kind {
	case v1alpha1.AcceleratorFunctionKind, v1alpha1.FpgaRegionKind:
		return key{kind: ref.Kind, name: ref.Name}, true
	}
	return key{}, false
}

// indexByOwner is the ownerIndex function.
func indexByOwner(obj any) ([]string, error) {
	class, ok := obj.(*resourceapi.DeviceClass)
	if !ok {
		return nil, fmt.Errorf("index %T: want a *DeviceClass", obj)
	}
	if k, ok := ownerKey(class); ok {
		return []string{k.String()}, nil
	}
	return nil, nil
}
