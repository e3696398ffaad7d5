package discovery

import (
	"fmt"
	"strings"
)

// AllF is the ID a kernel reports for a region or function that is unusable.
const AllF = "ffffffffffffffffffffffffffffffff"

// AllZero is the ID of nothing: no function loaded, or no interface.
const AllZero = "00000000000000000000000000000000"

// CanonicalID turns an ID as the kernel, a bitstream or a user prints it
// (32 hex digits, optionally dashed like a UUID, any case) into 32 lowercase
// hex digits. It fails when the result is not 32 hex digits.
func CanonicalID(s string) (string, error) {
	id := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", ""))
	id = strings.TrimPrefix(id, "0x")
	if len(id) != 32 {
		return "", fmt.Errorf("id %q has %d hex digits, want 32", s, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("id %q has a non-hex character %q", s, c)
		}
	}
	return id, nil
}

// ReadID reads a sysfs ID attribute (afu_id, compat_id, interface_id) and
// returns it in canonical form. Errors from the read (EBUSY while a port is
// being reprogrammed, ENOENT when the attribute is missing) are wrapped.
func ReadID(path string) (string, error) {
	return sysDir{fd: -1}.readIDPath(path)
}

// parseID canonicalises an ID attribute's content; where names the
// attribute in errors.
func parseID(where, s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("read %s: empty", where)
	}
	id, err := CanonicalID(s)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", where, err)
	}
	return id, nil
}

// AFUIDPath is the sysfs attribute that holds the AFU ID loaded behind a port
// (see Port.AFUIDFile).
func (p *Port) AFUIDPath() string {
	if p.AFUIDFile != "" {
		return p.AFUIDFile
	}
	return p.Node.SysfsPath + "/afu_id"
}

// ReadAFUID reads the AFU ID currently loaded behind the port.
func (p *Port) ReadAFUID() (string, error) { return ReadID(p.AFUIDPath()) }
