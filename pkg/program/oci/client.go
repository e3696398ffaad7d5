package oci

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// RegistryOptions say how to reach registries. The zero value reaches
// public HTTPS registries anonymously.
type RegistryOptions struct {
	// CredentialsFile is a docker config.json ("auths" with "auth" or
	// "username"/"password" per registry) read for every registry that
	// asks for credentials; re-read when it changes. Credential helpers
	// ("credsStore", "credHelpers") are not run. Empty: anonymous.
	CredentialsFile string
	// CAFile is a PEM bundle of CA certificates trusted for registries'
	// HTTPS, in addition to the system's.
	CAFile string
	// Insecure lists registries (host or host:port, as written in
	// references) reached over plain HTTP. Every other registry is reached
	// over HTTPS only.
	Insecure []string
	// Allowed lists the registries (host or host:port, as written in
	// references) bitstreams may be pulled from; empty: any registry a
	// claim names.
	Allowed []string
	// Retry bounds the retries of a request that failed because the
	// registry was unreachable, overloaded or failing (5xx, 429); nil uses
	// DefaultRetry.
	Retry *RetryPolicy
}

// RetryPolicy is an exponential backoff with jitter.
type RetryPolicy struct {
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int
	// MinWait and MaxWait bound each pause.
	MinWait, MaxWait time.Duration
}

// DefaultRetry retries 5 times over about 7 seconds.
var DefaultRetry = RetryPolicy{MaxRetries: 5, MinWait: 250 * time.Millisecond, MaxWait: 3 * time.Second}

// Client reaches registries as RegistryOptions say. It is safe for
// concurrent use; it caches tokens per registry and repository.
type Client struct {
	auth     *auth.Client
	insecure map[string]bool
	// allowed are the registries claims may name (none: any).
	allowed map[string]bool
}

// NewClient checks the options (the credentials file parses, the CA file
// holds certificates, insecure entries are hosts) and returns a Client.
func NewClient(o RegistryOptions) (*Client, error) {
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = time.Minute
	if o.CAFile != "" {
		pool, err := certPool(o.CAFile)
		if err != nil {
			return nil, err
		}
		base.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	policy := DefaultRetry
	if o.Retry != nil {
		policy = *o.Retry
	}
	transport := retry.NewTransport(base)
	transport.Policy = func() retry.Policy {
		return &retry.GenericPolicy{
			Retryable: retryable,
			Backoff:   retry.ExponentialBackoff(policy.MinWait, 2, 0.1),
			MinWait:   policy.MinWait,
			MaxWait:   policy.MaxWait,
			MaxRetry:  policy.MaxRetries,
		}
	}
	c := &Client{
		auth: &auth.Client{
			Client: &http.Client{Transport: transport},
			Cache:  auth.NewCache(),
			Header: http.Header{"User-Agent": {"fpga-dra-driver"}},
		},
	}
	if o.CredentialsFile != "" {
		creds, err := newFileCredentials(o.CredentialsFile)
		if err != nil {
			return nil, err
		}
		c.auth.Credential = creds.get
	}
	var err error
	if c.insecure, err = registryHosts(FlagInsecureRegistries, o.Insecure); err != nil {
		return nil, err
	}
	if c.allowed, err = registryHosts(FlagAllowedRegistries, o.Allowed); err != nil {
		return nil, err
	}
	c.allowed = canonicalHosts(c.allowed)
	return c, nil
}

// canonicalHost is the registry host h names, for comparisons: DNS names
// are case-insensitive, and docker.io is reached as registry-1.docker.io.
func canonicalHost(h string) string {
	h = strings.ToLower(h)
	if h == "registry-1.docker.io" {
		return "docker.io"
	}
	return h
}

func canonicalHosts(hosts map[string]bool) map[string]bool {
	out := make(map[string]bool, len(hosts))
	for h := range hosts {
		out[canonicalHost(h)] = true
	}
	return out
}

// registryHosts is the set of registry hosts in list (the value of --flag).
func registryHosts(flag string, list []string) (map[string]bool, error) {
	hosts := map[string]bool{}
	for _, h := range list {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if err := (registry.Reference{Registry: h}).ValidateRegistry(); err != nil || strings.Contains(h, "/") {
			return nil, fmt.Errorf("--%s: %q is not a registry host: list hosts as they appear in references, such as registry.local:5000", flag, h)
		}
		hosts[h] = true
	}
	return hosts, nil
}

// checkAllowed refuses a reference to a registry outside --allowed-registries.
func (c *Client) checkAllowed(ref v1alpha1.BitstreamRef, reference string) error {
	if len(c.allowed) == 0 || c.allowed[canonicalHost(ref.Registry)] {
		return nil
	}
	hosts := make([]string, 0, len(c.allowed))
	for h := range c.allowed {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return errorf(program.ErrNotFound, "%w: bitstream %s is in registry %s, and this node pulls bitstreams only from %s (--%s): push it to one of those, or ask the cluster admin to allow %s",
		ErrNotAllowed, reference, ref.Registry, strings.Join(hosts, ", "), FlagAllowedRegistries, ref.Registry)
}

// certPool returns the system's CA certificates plus those in the PEM file.
func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", FlagRegistryCAFile, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--%s: %s holds no PEM certificate: give the registry's CA certificate in PEM form", FlagRegistryCAFile, file)
	}
	return pool, nil
}

// retryable retries what retry.DefaultPredicate retries, and also a
// registry that refuses connections or cannot be routed to: a registry
// being restarted, or a network coming up.
func retryable(resp *http.Response, err error) (bool, error) {
	if err != nil {
		var dns *net.DNSError
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
			(errors.As(err, &dns) && (dns.IsTemporary || dns.IsTimeout)) {
			return true, nil
		}
	}
	return retry.DefaultPredicate(resp, err)
}

// repository returns the remote repository of ref.
func (c *Client) repository(ref v1alpha1.BitstreamRef) *remote.Repository {
	return &remote.Repository{
		Client:           c.auth,
		Reference:        registry.Reference{Registry: ref.Registry, Repository: ref.Repository},
		PlainHTTP:        c.insecure[ref.Registry],
		MaxMetadataBytes: maxManifestBytes,
		SkipReferrersGC:  true,
	}
}

// classify turns an error of a registry request about what (a manifest or
// blob of ref) into one that says what went wrong and what to do, matching
// the package's sentinels.
func (c *Client) classify(err error, what string, ref v1alpha1.BitstreamRef) error {
	host := ref.Registry
	var resp *errcode.ErrorResponse
	var certErr *tls.CertificateVerificationError
	var netErr net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("registry %s, %s: %w", host, what, err)
	case errors.As(err, &resp) && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%w: registry %s answered %d to a request for %s: put credentials for %s in the registry credentials file (--%s) and check that they may pull from %s: %w",
			ErrUnauthorized, host, resp.StatusCode, what, host, FlagRegistryConfig, ref.Repository, err)
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		return fmt.Errorf("%w: registry %s requires credentials for %s and the node has none for it: put credentials for %s in the registry credentials file (--%s)",
			ErrUnauthorized, host, what, host, FlagRegistryConfig)
	case errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound, errors.Is(err, errdef.ErrNotFound):
		return errorf(program.ErrNotFound, "%w: registry %s has no %s: check the reference, or push the bitstream with `fpga-dra-driver bitstream push`: %w", ErrNotFound, host, what, err)
	case errors.As(err, &certErr):
		return fmt.Errorf("%w: registry %s: its HTTPS certificate is not trusted (%v): give its CA with --%s", ErrUnreachable, host, certErr.Err, FlagRegistryCAFile)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%w: registry %s speaks plain HTTP, and only registries listed in --%s are reached over plain HTTP: list it there if it is meant to be plain HTTP, or give it HTTPS",
			ErrUnreachable, host, FlagInsecureRegistries)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr):
		return fmt.Errorf("%w: registry %s did not answer a request for %s, after retries: %w", ErrUnreachable, host, what, err)
	}
	return fmt.Errorf("registry %s, %s: %w", host, what, err)
}
