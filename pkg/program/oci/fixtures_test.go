package oci

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"

	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// IDs from the Intel device plugin's test fixture.
const (
	testIf   = "69528db6eb31577a8c3668f9faa081f6"
	testIf2  = "0123456789abcdef0123456789abcdef"
	testAFU  = "d8424dc4a4a3c413f89e433683f9040b"
	testAFU2 = "f7df405cbd7acf7222f144b0b93acd18"
)

// gbsBytes returns a valid GBS for the IDs with a payload of about
// payloadLen bytes.
func gbsBytes(t testing.TB, ifID, afuID string, payloadLen int) []byte {
	t.Helper()
	payload, err := program.SimPayload(afuID, payloadLen)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := program.WriteGBS(&b, program.NewGBSMetadata(ifID, afuID, "nlb"), payload); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// writeFile writes data to a new file name in a temporary directory.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeGBS writes gbsBytes to a file and returns its path.
func writeGBS(t testing.TB, ifID, afuID string, payloadLen int) string {
	t.Helper()
	return writeFile(t, afuID+".gbs", gbsBytes(t, ifID, afuID, payloadLen))
}

// newClient returns a client for r, failing the test on error.
func newClient(t testing.TB, o RegistryOptions) *Client {
	t.Helper()
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// push pushes file to r's repo:tag and returns the pinned reference.
func push(t testing.TB, c *Client, r *registrytest.Registry, file, repoTag string) *Pushed {
	t.Helper()
	p, err := c.Push(t.Context(), file, r.Host+"/"+repoTag)
	if err != nil {
		t.Fatalf("Push(%s) error = %v", file, err)
	}
	return p
}

// pushCrafted pushes layer as the one blob of a manifest that edit may
// change after it is filled in as Push fills it (annotations for gbs of
// testIf/testAFU), and returns the digest reference. It bypasses Push's
// checks, to give a node what a careless or hostile publisher could.
func pushCrafted(t testing.TB, c *Client, r *registrytest.Registry, repo string, layer []byte, edit func(m *ocispec.Manifest)) string {
	t.Helper()
	ctx := t.Context()
	ref := v1alpha1.BitstreamRef{Registry: r.Host, Repository: repo}
	rp := c.repository(ref)
	l := content.NewDescriptorFromBytes(LayerMediaType, layer)
	if err := pushBlob(ctx, c, rp, ref, l, bytes.NewReader(layer)); err != nil {
		t.Fatal(err)
	}
	empty := ocispec.DescriptorEmptyJSON
	if err := pushBlob(ctx, c, rp, ref, empty, bytes.NewReader(empty.Data)); err != nil {
		t.Fatal(err)
	}
	m := ocispec.Manifest{
		MediaType:    ocispec.MediaTypeImageManifest,
		ArtifactType: ArtifactType,
		Config:       empty,
		Layers:       []ocispec.Descriptor{l},
		Annotations:  Annotations{Format: program.FormatGBS, Vendor: VendorIntel, InterfaceID: testIf, AFUID: testAFU}.Map(),
	}
	m.SchemaVersion = 2
	if edit != nil {
		edit(&m)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	desc := content.NewDescriptorFromBytes(ocispec.MediaTypeImageManifest, raw)
	if err := rp.Push(ctx, desc, bytes.NewReader(raw)); err != nil {
		t.Fatalf("push crafted manifest: %v", err)
	}
	ref.Digest = desc.Digest.String()
	return ref.String()
}

// newPuller returns a Puller reaching r with a cache in a new directory
// (or dir, when not empty).
func newPuller(t testing.TB, r *registrytest.Registry, dir string, edit func(o *PullerOptions)) *Puller {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	o := PullerOptions{Registry: registryOptions(r), CacheDir: dir, CacheSize: 1 << 30}
	if edit != nil {
		edit(&o)
	}
	p, err := NewPuller(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// zeroDigest is a well-formed digest no registry holds.
var zeroDigest = digest.NewDigestFromEncoded(digest.SHA256, "0000000000000000000000000000000000000000000000000000000000000000")

// registryOptions returns options that reach r: its CA for TLS, plain
// HTTP otherwise, quick retries.
func registryOptions(r *registrytest.Registry) RegistryOptions {
	o := RegistryOptions{Retry: &RetryPolicy{MaxRetries: 2, MinWait: 5 * time.Millisecond, MaxWait: 10 * time.Millisecond}}
	if r.Config.TLS {
		o.CAFile = r.CAFile
	} else {
		o.Insecure = []string{r.Host}
	}
	return o
}

// holdersOf lists who holds layer d, leaving out a Fetch's own transient
// holds.
func holdersOf(p *Puller, d string) []string {
	p.cache.mu.Lock()
	defer p.cache.mu.Unlock()
	var hs []string
	for h, ds := range p.cache.holders {
		if ds[digest.Digest(d)] && !strings.HasPrefix(h, transientHolderPrefix) {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	return hs
}
