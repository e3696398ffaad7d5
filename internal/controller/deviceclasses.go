package controller

import (
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
)

// Labels on every DeviceClass the controller keeps.
const (
	// ManagedByLabel marks the DeviceClasses the controller keeps.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "fpga-dra-controller"
)

// BaseDeviceClass is the DeviceClass named after the driver that selects
// every device of the driver. The Helm chart ships it; the controller does
// not manage it.
func BaseDeviceClass(driverName string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: DriverSelector(driverName)}}},
		},
	}
}

// AcceleratorFunctionClasses returns the DeviceClasses af asks for, in
// firstAvailable order, each owned by af:
//
//   - NAME: LoadedSelector, with an FpgaConfig of afuID, interfaceID and
//     programming: Never, so the node refuses a port where the function is
//     not (or no longer) loaded.
//   - NAME-program (region mode only): ProgrammableSelector, with an
//     FpgaConfig of afuID, interfaceID, bitstream or bitstreamRef, sha256 and
//     programming: IfNeeded, so the node loads the function unless it is
//     loaded already.
//
// With extendedResourceDomain set and an interfaceID in af, NAME also
// carries extendedResourceName <extendedResourceDomain>/<the Intel FPGA
// device plugin's af resource name> (see extresource.AFName): a pod that
// asks for that extended resource, as pod specs written for the device
// plugin do, gets a port with the function loaded through DRA.
//
// af must be valid (ValidateAcceleratorFunction).
func AcceleratorFunctionClasses(af *v1alpha1.AcceleratorFunction, driverName, extendedResourceDomain string) ([]*resourceapi.DeviceClass, error) {
	s := af.Spec
	owner := ownerReference(af, v1alpha1.AcceleratorFunctionKind)
	loadedCfg := &v1alpha1.FpgaConfig{
		AFUID:       s.AFUID,
		InterfaceID: s.InterfaceID,
		Programming: v1alpha1.ProgrammingNever,
	}
	loadedSel := NameClassSelector(driverName, s)
	if pinned(s) {
		// A pinned function: afu_id alone does not say which file put
		// it there (another claim may have loaded another build, or
		// anyone's file that declares this AFU ID). The node keeps a
		// region only when it loaded the pinned file there itself and
		// programs any other, so only nodes that allow programming
		// serve the class.
		loadedCfg.Bitstream, loadedCfg.BitstreamRef, loadedCfg.SHA256 = s.Bitstream, s.BitstreamRef, s.SHA256
		loadedCfg.Programming = v1alpha1.ProgrammingIfNeeded
	}
	loaded, err := deviceClass(af.Name, owner, driverName, loadedSel, loadedCfg)
	if err != nil {
		return nil, err
	}
	if extendedResourceDomain != "" && s.InterfaceID != "" {
		name, err := extresource.AFName(s.InterfaceID, s.AFUID)
		if err != nil {
			return nil, fmt.Errorf("extended resource name of AcceleratorFunction %s: %w", af.Name, err)
		}
		name = extendedResourceDomain + "/" + name
		loaded.Spec.ExtendedResourceName = &name
	}
	classes := []*resourceapi.DeviceClass{loaded}
	if s.Mode != v1alpha1.ModeRegion {
		return classes, nil
	}
	program, err := deviceClass(af.Name+v1alpha1.ProgramClassSuffix, owner, driverName, ProgrammableSelector(driverName, s.InterfaceID), &v1alpha1.FpgaConfig{
		AFUID:        s.AFUID,
		InterfaceID:  s.InterfaceID,
		Bitstream:    s.Bitstream,
		BitstreamRef: s.BitstreamRef,
		SHA256:       s.SHA256,
		Programming:  v1alpha1.ProgrammingIfNeeded,
	})
	if err != nil {
		return nil, err
	}
	return append(classes, program), nil
}

// pinned reports whether a function pins its bitstream's content.
func pinned(s v1alpha1.AcceleratorFunctionSpec) bool { return s.SHA256 != "" || s.BitstreamRef != "" }

// NameClassSelector is the selector of an AcceleratorFunction's NAME
// class: LoadedSelector, on programmable nodes only for a pinned function.
// The status counts loaded devices with it, so that it counts what the
// class can allocate.
func NameClassSelector(driverName string, s v1alpha1.AcceleratorFunctionSpec) string {
	if pinned(s) {
		return PinnedLoadedSelector(driverName, s.AFUID, s.InterfaceID)
	}
	return LoadedSelector(driverName, s.AFUID, s.InterfaceID)
}

// FpgaRegionClass returns the DeviceClass r asks for, named after it and
// owned by it: ProgrammableSelector and no config (the claim names the
// function to load). r must be valid (ValidateFpgaRegion).
func FpgaRegionClass(r *v1alpha1.FpgaRegion, driverName string) *resourceapi.DeviceClass {
	// Without a config deviceClass cannot fail.
	c, _ := deviceClass(r.Name, ownerReference(r, v1alpha1.FpgaRegionKind), driverName,
		ProgrammableSelector(driverName, r.Spec.InterfaceID), nil)
	return c
}

// deviceClass builds a managed DeviceClass with one CEL selector and, when
// cfg is not nil, cfg as its opaque configuration for the driver.
func deviceClass(name string, owner metav1.OwnerReference, driverName, selector string, cfg *v1alpha1.FpgaConfig) (*resourceapi.DeviceClass, error) {
	c := &resourceapi.DeviceClass{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            name,
			Labels:          map[string]string{ManagedByLabel: ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}},
		},
	}
	if cfg == nil {
		return c, nil
	}
	cfg.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.FpgaConfigKind}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode the FpgaConfig of DeviceClass %s: %w", name, err)
	}
	c.Spec.Config = []resourceapi.DeviceClassConfiguration{{
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver:     driverName,
			Parameters: runtime.RawExtension{Raw: raw},
		}},
	}}
	return c, nil
}

// ownerReference makes obj the controlling owner of a DeviceClass, so that
// the garbage collector deletes the class with obj.
func ownerReference(obj metav1.Object, kind string) metav1.OwnerReference {
	return *metav1.NewControllerRef(obj, v1alpha1.SchemeGroupVersion.WithKind(kind))
}
