package v1alpha1

import (
	"fmt"
	"strings"
)

// idDigits is the length of a canonical AFU or interface ID.
const idDigits = 32

// allF is the ID the kernel reports for an unusable function or region.
const allF = "ffffffffffffffffffffffffffffffff"

// canonicalID turns an ID as a user, a bitstream or the kernel prints it (32
// hex digits, optionally dashed like a UUID, any case, optionally "0x"
// prefixed) into 32 lowercase hex digits. It accepts exactly what
// discovery.CanonicalID accepts and returns the same result; this API package
// keeps its own copy so it depends on apimachinery only.
func canonicalID(s string) (string, error) {
	id := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", ""))
	id = strings.TrimPrefix(id, "0x")
	if len(id) != idDigits {
		return "", fmt.Errorf("has %d hex digits, want %d", len(id), idDigits)
	}
	if !isLowerHex(id) {
		return "", fmt.Errorf("has a character that is not a hex digit")
	}
	return id, nil
}

// isLowerHex reports whether s is made of 0-9 and a-f only.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
