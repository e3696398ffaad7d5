package webhook

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
)

// The resources the webhook reviews.
var (
	resourceClaims         = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
	resourceClaimTemplates = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"}
	deviceClasses          = schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}
	acceleratorFunctions   = v1alpha1.AcceleratorFunctionsResource.GroupResource()
	fpgaRegions            = v1alpha1.FpgaRegionsResource.GroupResource()
)

// claimSpec is the part of a ResourceClaimSpec the webhook reads. Its shape
// is the same in resource.k8s.io v1, v1beta2 and v1beta1, so one decoder
// serves every version the API server sends.
type claimSpec struct {
	Devices struct {
		Config opaqueConfigs `json:"config"`
	} `json:"devices"`
}

// opaqueConfigs is the part of a device config list the webhook reads, as
// ResourceClaimSpec.devices.config and DeviceClassSpec.config hold it.
type opaqueConfigs []struct {
	Opaque *struct {
		Driver     string          `json:"driver"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"opaque"`
}

// validateClaim validates the opaque configs for the driver in a
// ResourceClaim (see validateClaimSpec).
func (h *Handler) validateClaim(raw []byte) (field.ErrorList, error) {
	var claim struct {
		Spec claimSpec `json:"spec"`
	}
	if err := json.Unmarshal(raw, &claim); err != nil {
		return nil, err
	}
	return h.validateClaimSpec(&claim.Spec, field.NewPath("spec")), nil
}

// validateClaimTemplate validates the opaque configs for the driver in a
// ResourceClaimTemplate (see validateClaimSpec).
func (h *Handler) validateClaimTemplate(raw []byte) (field.ErrorList, error) {
	var template struct {
		Spec struct {
			Spec claimSpec `json:"spec"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &template); err != nil {
		return nil, err
	}
	return h.validateClaimSpec(&template.Spec.Spec, field.NewPath("spec", "spec")), nil
}

// validateClaimSpec validates every opaque config for the driver in spec,
// found at specPath: strict decoding, defaulting and validation exactly as
// the node does them, with errors below
// specPath.devices.config[i].opaque.parameters. Configs of other drivers
// are not looked at.
func (h *Handler) validateClaimSpec(spec *claimSpec, specPath *field.Path) field.ErrorList {
	return h.validateConfigs(spec.Devices.Config, specPath.Child("devices", "config"))
}

// validateConfigs validates the driver's opaque configs in configs, the
// list at configPath.
func (h *Handler) validateConfigs(configs opaqueConfigs, configPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, cfg := range configs {
		if cfg.Opaque == nil || cfg.Opaque.Driver != h.driverName {
			continue
		}
		path := configPath.Index(i).Child("opaque", "parameters")
		fc, err := v1alpha1.Decode(cfg.Opaque.Parameters)
		if err != nil {
			errs = append(errs, field.Invalid(path, field.OmitValueType{}, err.Error()))
			continue
		}
		fc.Default()
		errs = append(errs, v1alpha1.ValidateFpgaConfig(fc, path)...)
	}
	return errs
}

// validateDeviceClass validates the opaque configs for the driver in a
// DeviceClass: the node applies them before the claim's own.
func (h *Handler) validateDeviceClass(raw []byte) (field.ErrorList, error) {
	var class struct {
		Spec struct {
			Config opaqueConfigs `json:"config"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &class); err != nil {
		return nil, err
	}
	return h.validateConfigs(class.Spec.Config, field.NewPath("spec", "config")), nil
}

// validateAcceleratorFunction validates an AcceleratorFunction as the
// controller does.
func validateAcceleratorFunction(raw []byte) (field.ErrorList, error) {
	var af v1alpha1.AcceleratorFunction
	if err := json.Unmarshal(raw, &af); err != nil {
		return nil, err
	}
	return v1alpha1.ValidateAcceleratorFunction(&af), nil
}

// validateFpgaRegion validates an FpgaRegion as the controller does.
func validateFpgaRegion(raw []byte) (field.ErrorList, error) {
	var r v1alpha1.FpgaRegion
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	return v1alpha1.ValidateFpgaRegion(&r), nil
}
