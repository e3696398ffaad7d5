package v1alpha1

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxBitstreamRefLength is the longest bitstreamRef accepted, in bytes.
const MaxBitstreamRefLength = 512

// Parts of BitstreamRefPattern. They use character classes instead of
// backslash escapes so that the same text serves as a Go regexp and inside a
// CEL string literal of the CRD.
const (
	hostLabel = `[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?`
	port      = `(:[0-9]+)?`
	// registryHost needs a dot, a port, "localhost" or an IPv6 literal, so
	// that a Docker Hub-style "user/image" is never read as host "user".
	registryHost = `(localhost` + port + `|` + hostLabel + `([.]` + hostLabel + `)+` + port + `|` +
		hostLabel + `:[0-9]+|[[][0-9a-fA-F:]+[]]` + port + `)`
	pathComponent = `[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*`
	repositoryRE  = pathComponent + `(/` + pathComponent + `)*`
	tagRE         = `[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}`
	digestRE      = `sha256:[0-9a-f]{64}`
)

// BitstreamRefPattern is the whole syntax of a bitstreamRef: the CRD checks
// it with this very expression, and it accepts exactly what
// ParseBitstreamRef accepts (up to MaxBitstreamRefLength bytes).
const BitstreamRefPattern = `^` + registryHost + `/` + repositoryRE + `(:` + tagRE + `)?@` + digestRE + `$`

var (
	registryHostRegexp = regexp.MustCompile(`^` + registryHost + `$`)
	repositoryRegexp   = regexp.MustCompile(`^` + repositoryRE + `$`)
	tagRegexp          = regexp.MustCompile(`^` + tagRE + `$`)
	digestRegexp       = regexp.MustCompile(`^` + digestRE + `$`)
)

// exampleDigest shows the form of a digest in error messages.
const exampleDigest = "sha256:<64 hex digits of the manifest digest>"

// pinHint says where a digest comes from.
const pinHint = "`fpga-dra-driver bitstream push` prints it, `fpga-dra-driver bitstream inspect REFERENCE` shows it"

// BitstreamRef is an OCI reference to a bitstream artifact, pinned by the
// digest of its manifest: REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST. The tag,
// when present, documents which version was pinned; only the digest decides
// what is pulled.
//
// +kubebuilder:object:generate=false
type BitstreamRef struct {
	// Registry is the registry's host, with a port when not the default
	// one (registry.example.com, localhost:5000, [::1]:5000).
	Registry string
	// Repository is the path of the repository in the registry.
	Repository string
	// Tag is empty when the reference has none.
	Tag string
	// Digest is "sha256:" and 64 lowercase hex digits.
	Digest string
}

// String returns the reference as ParseBitstreamRef (or, without a digest,
// ParseBitstreamRepository) reads it.
func (r BitstreamRef) String() string {
	s := r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// ParseBitstreamRef parses a digest-pinned OCI reference. A reference
// without a digest (a tag alone, or a bare repository) is refused: a tag can
// be moved to other content. The error describes the problem and the fix
// but does not repeat s; callers name the field and the value.
func ParseBitstreamRef(s string) (BitstreamRef, error) {
	if err := checkRefText(s); err != nil {
		return BitstreamRef{}, err
	}
	name, digest, pinned := strings.Cut(s, "@")
	if !pinned {
		return BitstreamRef{}, fmt.Errorf("has no digest, and a tag can be moved to other content: pin the manifest digest, as in %s@%s (%s)",
			s, exampleDigest, pinHint)
	}
	if !digestRegexp.MatchString(digest) {
		if algo, _, ok := strings.Cut(digest, ":"); ok && algo != "sha256" {
			return BitstreamRef{}, fmt.Errorf("digest %q uses %q: only sha256 digests are supported; pin the manifest's sha256 digest (%s)", digest, algo, pinHint)
		}
		return BitstreamRef{}, fmt.Errorf("digest %q is not %s: copy the digest exactly (%s)", digest, exampleDigest, pinHint)
	}
	ref, err := parseName(name, s)
	if err != nil {
		return BitstreamRef{}, err
	}
	ref.Digest = digest
	return ref, nil
}

// ParseBitstreamRepository parses REGISTRY/REPOSITORY[:TAG], a reference
// without a digest: where a bitstream is pushed to, or looked up by an
// administrator. The syntax is that of ParseBitstreamRef before the "@".
func ParseBitstreamRepository(s string) (BitstreamRef, error) {
	if err := checkRefText(s); err != nil {
		return BitstreamRef{}, err
	}
	if _, digest, ok := strings.Cut(s, "@"); ok {
		return BitstreamRef{}, fmt.Errorf("has a digest (%q) where a repository and an optional tag are expected: drop \"@%s\"", digest, digest)
	}
	return parseName(s, s)
}

// checkRefText checks what every reference needs: not empty, not too long,
// no blanks or control characters.
func checkRefText(s string) error {
	if s == "" {
		return errors.New("is empty: give REGISTRY/REPOSITORY[:TAG]@" + exampleDigest)
	}
	if len(s) > MaxBitstreamRefLength {
		return fmt.Errorf("is %d bytes, more than %d: use a shorter registry or repository name", len(s), MaxBitstreamRefLength)
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return fmt.Errorf("has a blank or control character at byte %d: remove it", i)
	}
	return nil
}

// parseName parses REGISTRY/REPOSITORY[:TAG]; example is the whole
// reference, shown with a registry added when the registry is missing.
func parseName(name, example string) (BitstreamRef, error) {
	host, path, ok := strings.Cut(name, "/")
	if !ok || !registryHostRegexp.MatchString(host) {
		return BitstreamRef{}, fmt.Errorf("does not start with a registry host (%q is not one: a host has a dot or a port, or is localhost): write the registry, as in registry.example.com/%s",
			host, strings.TrimPrefix(example, "/"))
	}
	ref := BitstreamRef{Registry: host, Repository: path}
	// A colon in the last path element separates the tag.
	if i := strings.LastIndexByte(path, ':'); i > strings.LastIndexByte(path, '/') {
		ref.Repository, ref.Tag = path[:i], path[i+1:]
		if !tagRegexp.MatchString(ref.Tag) {
			return BitstreamRef{}, fmt.Errorf("tag %q is not a valid tag (letters, digits, _ . -, at most 128, not starting with . or -): fix or drop the tag", ref.Tag)
		}
	}
	if !repositoryRegexp.MatchString(ref.Repository) {
		return BitstreamRef{}, fmt.Errorf("repository %q is not a valid repository path (lowercase letters and digits, separated by . _ __ - or /): use the repository the bitstream was pushed to", ref.Repository)
	}
	return ref, nil
}
