package v1alpha1

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// MaxBitstreamLength is the longest bitstream value accepted, in bytes:
	// the usual Linux limit for one file name.
	MaxBitstreamLength = 255
	// sha256Digits is the length of a SHA-256 digest in hex.
	sha256Digits = 64
	// exampleID shows the expected form of an ID in error messages.
	exampleID = "d8424dc4a4a3c413f89e433683f9040b"
)

// Validate checks a defaulted FpgaConfig against the rules documented on
// FpgaConfig. It returns nil or an aggregate of every field error found, each
// naming the field (e.g. "afuID"), the bad value and how to fix it. Call
// Default first: Validate does not canonicalise.
func (c *FpgaConfig) Validate() error {
	return ValidateFpgaConfig(c, nil).ToAggregate()
}

// ValidateFpgaConfig returns the field errors of a defaulted FpgaConfig, with
// paths below fldPath. A webhook passes the path of the opaque parameters in
// the object it reviews; nil gives paths relative to the FpgaConfig.
func ValidateFpgaConfig(c *FpgaConfig, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList

	afuPath := fldPath.Child("afuID")
	if c.AFUID == "" {
		errs = append(errs, field.Required(afuPath,
			fmt.Sprintf("name the accelerator function to load or assert, 32 hex digits such as %q", exampleID)))
	} else {
		errs = append(errs, validateID(c.AFUID, afuPath, "function")...)
	}
	if c.InterfaceID != "" {
		errs = append(errs, validateID(c.InterfaceID, fldPath.Child("interfaceID"), "region")...)
	}
	if c.Bitstream != "" {
		errs = append(errs, validateBitstream(c.Bitstream, fldPath.Child("bitstream"))...)
	}
	if c.BitstreamRef != "" {
		errs = append(errs, validateBitstreamSource(c.Bitstream, c.BitstreamRef, fldPath)...)
	}
	if c.SHA256 != "" {
		errs = append(errs, validateSHA256(c.SHA256, fldPath.Child("sha256"))...)
	}

	progPath := fldPath.Child("programming")
	switch c.Programming {
	case ProgrammingIfNeeded, ProgrammingAlways:
	case ProgrammingNever:
		if c.Bitstream != "" {
			errs = append(errs, field.Forbidden(fldPath.Child("bitstream"),
				"must be empty when programming is Never (nothing is loaded): remove it or set programming to IfNeeded or Always"))
		}
		if c.BitstreamRef != "" {
			errs = append(errs, field.Forbidden(fldPath.Child("bitstreamRef"),
				"must be empty when programming is Never (nothing is loaded): remove it or set programming to IfNeeded or Always"))
		}
		if c.SHA256 != "" {
			errs = append(errs, field.Forbidden(fldPath.Child("sha256"),
				"must be empty when programming is Never (nothing is loaded): remove it or set programming to IfNeeded or Always"))
		}
	case "":
		errs = append(errs, field.Required(progPath,
			fmt.Sprintf("set one of %s (Default sets %s)", quoteAll(SupportedProgrammingPolicies), ProgrammingIfNeeded)))
	default:
		errs = append(errs, field.NotSupported(progPath, c.Programming, SupportedProgrammingPolicies))
	}
	return errs
}

// validateID checks that id is a canonical, usable AFU or interface ID. what
// names the thing an all-f ID would mark unusable.
func validateID(id string, fldPath *field.Path, what string) field.ErrorList {
	canonical, err := canonicalID(id)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(fldPath, id,
			fmt.Sprintf("%v: use 32 hex digits such as %q (UUID dashes and uppercase are accepted)", err, exampleID))}
	case canonical != id:
		return field.ErrorList{field.Invalid(fldPath, id,
			fmt.Sprintf("is not canonical: use %q (Default canonicalises it)", canonical))}
	case id == allF:
		return field.ErrorList{field.Invalid(fldPath, id,
			fmt.Sprintf("the all-f ID marks an unusable %s: use the ID of a real one", what))}
	}
	return nil
}

// validateBitstream checks that name can only name a file inside the node's
// bitstream repository. It reports the first problem found.
func validateBitstream(name string, fldPath *field.Path) field.ErrorList {
	if len(name) > MaxBitstreamLength {
		return field.ErrorList{field.TooLong(fldPath, name, MaxBitstreamLength)}
	}
	if !utf8.ValidString(name) {
		return field.ErrorList{field.Invalid(fldPath, name, "must be valid UTF-8: name a file in the bitstream repository")}
	}
	if i := strings.IndexFunc(name, isControl); i >= 0 {
		return field.ErrorList{field.Invalid(fldPath, name,
			fmt.Sprintf("must not contain control characters (found %q at byte %d): name a file in the bitstream repository", name[i], i))}
	}
	if path.IsAbs(name) {
		return field.ErrorList{field.Invalid(fldPath, name,
			fmt.Sprintf("must be relative to the node's bitstream repository: use %q", strings.TrimLeft(name, "/")))}
	}
	for _, elem := range strings.Split(name, "/") {
		if elem == ".." {
			return field.ErrorList{field.Invalid(fldPath, name,
				`must not contain a ".." element: name a file inside the bitstream repository`)}
		}
	}
	if clean := path.Clean(name); clean != name || clean == "." {
		detail := fmt.Sprintf("must be a clean path to a file: use %q", clean)
		if clean == "." {
			detail = "must name a file, not the repository itself"
		}
		return field.ErrorList{field.Invalid(fldPath, name, detail)}
	}
	return nil
}

// validateBitstreamSource checks a bitstreamRef (ref, not empty) and that
// bitstream (name) is not set beside it; fldPath is the parent of both.
func validateBitstreamSource(name, ref string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if name != "" {
		errs = append(errs, field.Forbidden(fldPath.Child("bitstreamRef"),
			"bitstream and bitstreamRef exclude each other: keep bitstream for a file in each node's repository or bitstreamRef for an OCI artifact, not both"))
	}
	if _, err := ParseBitstreamRef(ref); err != nil {
		errs = append(errs, field.Invalid(fldPath.Child("bitstreamRef"), ref, err.Error()))
	}
	return errs
}

// validateSHA256 checks that sum is a SHA-256 digest in lowercase hex.
func validateSHA256(sum string, fldPath *field.Path) field.ErrorList {
	if len(sum) != sha256Digits || !isLowerHex(sum) {
		return field.ErrorList{field.Invalid(fldPath, sum,
			fmt.Sprintf("must be %d lowercase hex digits, as printed by sha256sum", sha256Digits))}
	}
	return nil
}

// isControl reports whether r is an ASCII control character (NUL included).
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// quoteAll renders policies as a quoted, comma-separated list.
func quoteAll(policies []ProgrammingPolicy) string {
	q := make([]string, len(policies))
	for i, p := range policies {
		q[i] = fmt.Sprintf("%q", p)
	}
	return strings.Join(q, ", ")
}
