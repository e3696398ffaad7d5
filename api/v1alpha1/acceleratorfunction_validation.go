package v1alpha1

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateAcceleratorFunction returns every rule af breaks, each with the
// field path (e.g. "spec.afuID"), the bad value and how to fix it. It checks
// what the CRD schema checks and more (control characters in bitstream,
// non-canonical IDs), so the admission webhook and the controller reject
// exactly the same objects. An empty mode counts as af, the API server's
// default.
func ValidateAcceleratorFunction(af *AcceleratorFunction) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateName(af.Name, MaxAcceleratorFunctionNameLength,
		fmt.Sprintf("the DeviceClass %q must fit in 253 characters", af.Name+ProgramClassSuffix))...)

	spec := field.NewPath("spec")
	s := af.Spec
	if s.AFUID == "" {
		errs = append(errs, field.Required(spec.Child("afuID"),
			fmt.Sprintf("name the accelerator function, 32 hex digits such as %q", exampleID)))
	} else {
		errs = append(errs, validateID(s.AFUID, spec.Child("afuID"), "function")...)
	}
	if s.InterfaceID != "" {
		errs = append(errs, validateID(s.InterfaceID, spec.Child("interfaceID"), "region")...)
	}
	switch s.Mode {
	case "", ModeAF:
		if s.Bitstream != "" {
			errs = append(errs, field.Forbidden(spec.Child("bitstream"),
				"allowed in region mode only (af mode never programs): remove it or set mode: region"))
		}
		if s.BitstreamRef != "" {
			errs = append(errs, field.Forbidden(spec.Child("bitstreamRef"),
				"allowed in region mode only (af mode never programs): remove it or set mode: region"))
		}
		if s.SHA256 != "" {
			errs = append(errs, field.Forbidden(spec.Child("sha256"),
				"allowed in region mode only (af mode never programs): remove it or set mode: region"))
		}
	case ModeRegion:
		if s.InterfaceID == "" {
			errs = append(errs, field.Required(spec.Child("interfaceID"),
				"required in region mode: only regions with this interface ID can load the function"))
		}
	default:
		errs = append(errs, field.NotSupported(spec.Child("mode"), s.Mode, SupportedModes))
	}
	if s.Bitstream != "" {
		errs = append(errs, validateBitstream(s.Bitstream, spec.Child("bitstream"))...)
	}
	if s.BitstreamRef != "" {
		errs = append(errs, validateBitstreamSource(s.Bitstream, s.BitstreamRef, spec)...)
	}
	if s.SHA256 != "" {
		errs = append(errs, validateSHA256(s.SHA256, spec.Child("sha256"))...)
	}
	errs = append(errs, validateDescription(s.Description, spec.Child("description"))...)
	return errs
}

// validateName checks that name is a DNS subdomain of at most max
// characters; why says what the limit is for.
func validateName(name string, max int, why string) field.ErrorList {
	path := field.NewPath("metadata", "name")
	if name == "" {
		return field.ErrorList{field.Required(path, "name the object: its DeviceClasses are named after it")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	if len(name) > max {
		err := field.TooLong(path, "", max)
		err.Detail += ": " + why
		errs = append(errs, err)
	}
	return errs
}

// validateDescription checks the length of a description in characters,
// as the CRD's maxLength counts it: a limit in bytes would refuse, in the
// webhook and the controller, a description in a non-Latin script that the
// API server accepts.
func validateDescription(d string, path *field.Path) field.ErrorList {
	if n := utf8.RuneCountInString(d); n > MaxDescriptionLength {
		err := field.TooLong(path, "", MaxDescriptionLength)
		err.Detail = fmt.Sprintf("%d characters, at most %d: shorten the description", n, MaxDescriptionLength)
		return field.ErrorList{err}
	}
	return nil
}
