package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateFpgaRegion returns every rule r breaks, each with the field path
// (e.g. "spec.interfaceID"), the bad value and how to fix it: what the CRD
// schema checks, and canonical IDs.
func ValidateFpgaRegion(r *FpgaRegion) field.ErrorList {
	errs := validateName(r.Name, 253, "it names the region's DeviceClass")
	spec := field.NewPath("spec")
	if r.Spec.InterfaceID == "" {
		errs = append(errs, field.Required(spec.Child("interfaceID"),
			fmt.Sprintf("name the regions' interface ID, 32 hex digits such as %q", "69528db6eb31577a8c3668f9faa081f6")))
	} else {
		errs = append(errs, validateID(r.Spec.InterfaceID, spec.Child("interfaceID"), "region")...)
	}
	errs = append(errs, validateDescription(r.Spec.Description, spec.Child("description"))...)
	return errs
}
