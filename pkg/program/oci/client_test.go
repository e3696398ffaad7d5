package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
)

func TestCredentials(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{User: "fpga", Password: "s3cret"})
	file := writeGBS(t, testIf, testAFU, 256)
	ctx := t.Context()

	anonymous := newClient(t, registryOptions(r))
	_, err := anonymous.Push(ctx, file, r.Host+"/accel/nlb0:v1")
	wantError(t, err, []error{ErrUnauthorized}, "registry "+r.Host+" requires credentials", "--"+FlagRegistryConfig)

	o := registryOptions(r)
	o.CredentialsFile = r.CredentialsFile(t, "wrong")
	_, err = newClient(t, o).Push(ctx, file, r.Host+"/accel/nlb0:v1")
	wantError(t, err, []error{ErrUnauthorized}, "answered 401")

	o.CredentialsFile = r.CredentialsFile(t, "s3cret")
	c := newClient(t, o)
	pushed := push(t, c, r, file, "accel/nlb0:v1")

	p := newPuller(t, r, "", func(po *PullerOptions) { po.Registry = o })
	if _, err := p.Fetch(ctx, pushed.Reference, FetchOptions{}); err != nil {
		t.Fatalf("Fetch with credentials error = %v", err)
	}
	_, err = newPuller(t, r, "", nil).Fetch(ctx, pushed.Reference, FetchOptions{})
	wantError(t, err, []error{ErrUnauthorized}, "--"+FlagRegistryConfig)
}

func TestCredentialsFileReloaded(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{User: "fpga", Password: "s3cret"})
	o := registryOptions(r)
	o.CredentialsFile = r.CredentialsFile(t, "s3cret")
	pushed := push(t, newClient(t, o), r, writeGBS(t, testIf, testAFU, 256), "accel/nlb0:v1")

	// The node starts with a stale password; the file is then replaced
	// (a rotated Secret) and the next pull uses the new one.
	o.CredentialsFile = r.CredentialsFile(t, "stale")
	p := newPuller(t, r, "", func(po *PullerOptions) { po.Registry = o })
	ctx := t.Context()
	_, err := p.Fetch(ctx, pushed.Reference, FetchOptions{})
	wantError(t, err, []error{ErrUnauthorized})
	fresh, err := os.ReadFile(r.CredentialsFile(t, "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := o.CredentialsFile + ".new"
	if err := os.WriteFile(tmp, append(fresh, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, o.CredentialsFile); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fetch(ctx, pushed.Reference, FetchOptions{}); err != nil {
		t.Fatalf("Fetch after the credentials file changed error = %v", err)
	}
}

func TestHTTPS(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{TLS: true})
	file := writeGBS(t, testIf, testAFU, 256)
	ctx := t.Context()

	untrusted := registryOptions(r)
	untrusted.CAFile = ""
	_, err := newClient(t, untrusted).Push(ctx, file, r.Host+"/accel/nlb0:v1")
	wantError(t, err, []error{ErrUnreachable}, "certificate is not trusted", "--"+FlagRegistryCAFile)

	c := newClient(t, registryOptions(r))
	pushed := push(t, c, r, file, "accel/nlb0:v1")
	if _, err := newPuller(t, r, "", nil).Fetch(ctx, pushed.Reference, FetchOptions{}); err != nil {
		t.Fatalf("Fetch over HTTPS with the CA error = %v", err)
	}
}

func TestPlainHTTPOnlyWhenListed(t *testing.T) {
	r := registrytest.Start(t, registrytest.Config{})
	o := registryOptions(r)
	o.Insecure = nil
	_, err := newClient(t, o).Push(t.Context(), writeGBS(t, testIf, testAFU, 256), r.Host+"/accel/nlb0:v1")
	wantError(t, err, []error{ErrUnreachable}, "speaks plain HTTP", "--"+FlagInsecureRegistries)
}

func TestNewClientRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	badJSON := filepath.Join(dir, "config.json")
	if err := os.WriteFile(badJSON, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    RegistryOptions
		want string
	}{
		{"CA file missing", RegistryOptions{CAFile: filepath.Join(dir, "none")}, "--" + FlagRegistryCAFile},
		{"CA file without certificates", RegistryOptions{CAFile: notPEM}, "holds no PEM certificate"},
		{"credentials file missing", RegistryOptions{CredentialsFile: filepath.Join(dir, "none.json")}, "--" + FlagRegistryConfig},
		{"credentials file malformed", RegistryOptions{CredentialsFile: badJSON}, `docker config.json with an "auths" object`},
		{"insecure entry with a path", RegistryOptions{Insecure: []string{"registry.local:5000/accel"}}, `"registry.local:5000/accel" is not a registry host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewClient(tc.o)
			wantError(t, err, nil, tc.want)
		})
	}
}

// TestAllowedRegistriesSameRegistry: a reference names an allowed
// registry however the host is spelled: DNS names are case-insensitive,
// and docker.io is registry-1.docker.io (oras connects to the latter for
// the former).
func TestAllowedRegistriesSameRegistry(t *testing.T) {
	c, err := NewClient(RegistryOptions{Allowed: []string{"Registry.Example.com", "docker.io", "registry-1.docker.io:5000"}})
	if err != nil {
		t.Fatal(err)
	}
	d := "@sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{
		"registry.example.com/fpga/accel" + d,
		"REGISTRY.EXAMPLE.COM/fpga/accel" + d,
		"registry-1.docker.io/fpga/accel" + d,
		"Docker.IO/fpga/accel" + d,
	} {
		ref, err := v1alpha1.ParseBitstreamRef(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if err := c.checkAllowed(ref, s); err != nil {
			t.Errorf("%s: %v, want it allowed", s, err)
		}
	}
	// Other registries stay refused.
	for _, s := range []string{"registry.example.com.evil.io/fpga/accel" + d, "docker.io:5000/fpga/accel" + d} {
		ref, _ := v1alpha1.ParseBitstreamRef(s)
		if err := c.checkAllowed(ref, s); !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%s: %v, want %v", s, err, ErrNotAllowed)
		}
	}
}
