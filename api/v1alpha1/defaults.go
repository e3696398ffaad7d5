package v1alpha1

import "strings"

// Default fills in defaults and canonicalises IDs in place. It never fails:
// a value it cannot canonicalise is left as it is for Validate to report.
// Default is idempotent.
func (c *FpgaConfig) Default() {
	c.AFUID = canonicalOrSame(c.AFUID)
	c.InterfaceID = canonicalOrSame(c.InterfaceID)
	c.SHA256 = strings.ToLower(c.SHA256)
	if c.Programming == "" {
		c.Programming = ProgrammingIfNeeded
	}
}

// canonicalOrSame returns the canonical form of id, or id itself when it is
// empty or not an ID.
func canonicalOrSame(id string) string {
	if id == "" {
		return id
	}
	if c, err := canonicalID(id); err == nil {
		return c
	}
	return id
}
