package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
)

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       options
		wantErr string
	}{
		{name: "defaults in a pod", o: options{namespace: "fpga", leaderElect: true, webhook: true, tlsMode: tlsSelfSigned}},
		{name: "no namespace for the lease", o: options{leaderElect: true}, wantErr: "--namespace"},
		{name: "no namespace for the secret", o: options{webhook: true, tlsMode: tlsSelfSigned}, wantErr: "--namespace"},
		{name: "files need no namespace", o: options{webhook: true, tlsMode: tlsFiles}},
		{name: "intel domain", o: options{extendedResourceDomain: "fpga.intel.com"}},
		{name: "bad domain", o: options{extendedResourceDomain: "FPGA/x"}, wantErr: `--extended-resource-domain "FPGA/x" is not a DNS subdomain`},
		{name: "unknown TLS mode", o: options{namespace: "fpga", webhook: true, tlsMode: "acme"}, wantErr: `--webhook-tls "acme": use self-signed or files`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		probe    error
		wantCode int
		wantBody string
	}{
		{probe: nil, wantCode: http.StatusOK, wantBody: "ok"},
		{probe: errors.New("the webhook has no serving certificate yet"), wantCode: http.StatusServiceUnavailable, wantBody: "no serving certificate"},
	} {
		rec := httptest.NewRecorder()
		check(func() error { return tc.probe })(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
			t.Errorf("probe %v: HTTP %d %q, want %d %q", tc.probe, rec.Code, rec.Body, tc.wantCode, tc.wantBody)
		}
	}
}

func TestFlagsHaveEnvironmentTwins(t *testing.T) {
	t.Setenv("DRIVER_NAME", "fpga.example.com")
	t.Setenv("WEBHOOK_TLS", tlsFiles)
	cmd := newRootCommand()
	if err := cmd.ParseFlags([]string{"--webhook-tls=" + tlsSelfSigned}); err != nil {
		t.Fatal(err)
	}
	if err := flagenv.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	// The command line wins over the environment.
	for flag, want := range map[string]string{"driver-name": "fpga.example.com", "webhook-tls": tlsSelfSigned} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q from the environment", flag, got, want)
		}
	}
}

// TestVersion: --version prints the version and the commit, and runs
// nothing else.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs([]string{"--version"})
	cmd.SetOut(&out)
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), version.Version()) || !strings.Contains(out.String(), "commit "+version.GitCommit()) {
		t.Errorf("--version: %v\n%s\nwant the version %s and commit %s", err, out.String(), version.Version(), version.GitCommit())
	}
}
