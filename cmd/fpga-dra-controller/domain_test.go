package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fpga-dra/fpga-dra-driver/internal/extresource"
)

// TestExtendedResourceDomainMatchesAPIServer: --extended-resource-domain
// refuses a domain the API server refuses in a DeviceClass's
// extendedResourceName (IsExtendedResourceName: not in *kubernetes.io/,
// and "requests.<name>" a qualified name), which would leave every
// AcceleratorFunction with an interfaceID failing for good.
func TestExtendedResourceDomainMatchesAPIServer(t *testing.T) {
	name, err := extresource.AFName("69528db6eb31577a8c3668f9faa081f6", "d8424dc4a4a3c413f89e433683f9040b")
	if err != nil {
		t.Fatal(err)
	}
	for _, domain := range []string{"fpga.kubernetes.io", strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60)} {
		o := options{extendedResourceDomain: domain, leaderElect: false, webhook: false}
		full := domain + "/" + name
		apiOK := !strings.Contains(full, "kubernetes.io/") && len(validation.IsQualifiedName("requests."+full)) == 0
		if err := o.validate(); err == nil && !apiOK {
			t.Errorf("--extended-resource-domain %q (%d chars) accepted, but the API server refuses extendedResourceName %q", domain, len(domain), full)
		}
	}
}

// TestRequestsPrefixedDomainRefused: the API server also refuses an
// extended resource name that starts with "requests.".
func TestRequestsPrefixedDomainRefused(t *testing.T) {
	o := options{extendedResourceDomain: "requests.example.com"}
	if err := o.validate(); err == nil {
		t.Errorf("--extended-resource-domain requests.example.com accepted; the API server refuses requests.example.com/af-... (prefix \"requests.\")")
	}
}
