package state_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
	"github.com/fpga-dra/fpga-dra-driver/internal/state"
	"github.com/fpga-dra/fpga-dra-driver/internal/testnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// TestPrepareFromRegistry: a claim that names a digest-pinned OCI
// reference gets its region programmed from the registry (the pull runs in
// the programming job); the record keeps the layer, and a later claim gets
// the cached copy while the registry is down; an unknown digest fails
// with a clear error and nothing programmed.
func TestPrepareFromRegistry(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Config{})
	opts := oci.RegistryOptions{Insecure: []string{reg.Host}}
	client, err := oci.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "accel.gbs")
	testnode.WriteBitstream(t, src, simnode.DefaultInterfaceID, testnode.NewAFU)
	pushed, err := client.Push(ctx, src, reg.Host+"/fpga/accel:v1")
	if err != nil {
		t.Fatal(err)
	}
	puller, err := oci.NewPuller(ctx, oci.PullerOptions{Registry: opts, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { puller.Close() })
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}, Registry: puller, NoRestore: true})
	if _, err := n.State.Restore(ctx, n.Devices(t)); err != nil {
		t.Fatal(err)
	}
	devs := n.Devices(t)
	ports := devs.Ports()
	cfg := &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, BitstreamRef: pushed.Reference, Programming: v1alpha1.ProgrammingIfNeeded}

	a := holder("a")
	out := prepareUntilDone(t, n.State, a, request(ports[0].DeviceName(), cfg), devs)
	if len(out.Programmed) != 1 || out.Programmed[0].LayerDigest != pushed.LayerDigest || out.Programmed[0].Bitstream != pushed.Reference {
		t.Fatalf("programmed %+v, want the layer %s of %s", out.Programmed, pushed.LayerDigest, pushed.Reference)
	}
	if got := afuID(t, n, ports[0].DeviceName()); got != testnode.NewAFU {
		t.Fatalf("region carries %s, want %s", got, testnode.NewAFU)
	}
	rec, _ := n.State.Claim(a.UID)
	if rec.Devices[0].LayerDigest != pushed.LayerDigest || rec.Devices[0].SHA256 == "" {
		t.Fatalf("record %+v keeps no layer", rec.Devices[0])
	}

	// The registry goes away: the cached copy serves the next claim.
	reg.Stop()
	b := holder("b")
	out = prepareUntilDone(t, n.State, b, request(ports[1].DeviceName(), cfg), devs)
	if len(out.Programmed) != 1 || out.Programmed[0].Err != nil {
		t.Fatalf("claim from the cache: %+v", out.Programmed)
	}
	if got := afuID(t, n, ports[1].DeviceName()); got != testnode.NewAFU {
		t.Fatalf("region carries %s, want %s", got, testnode.NewAFU)
	}
	if s := puller.Stats(); s.Pulls != 1 || s.CacheHits < 1 {
		t.Fatalf("puller %+v, want one pull and a cache hit", s)
	}

	// Another digest of the same repository, never pulled: a clear error,
	// nothing programmed.
	before := n.Programmer.TotalCalls()
	unprepareUntilDone(t, n.State, a.UID)
	missing := &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, Programming: v1alpha1.ProgrammingAlways,
		BitstreamRef: reg.Host + "/fpga/accel@sha256:" + strings.Repeat("ab", 32)}
	_, err = n.State.Prepare(ctx, holder("c"), request(ports[0].DeviceName(), missing), devs)
	for errors.Is(err, state.ErrInProgress) {
		_, err = n.State.Prepare(ctx, holder("c"), request(ports[0].DeviceName(), missing), devs)
	}
	if err == nil || !strings.Contains(err.Error(), reg.Host) {
		t.Fatalf("uncached digest with the registry down: %v, want an error naming the registry", err)
	}
	if n.Programmer.TotalCalls() != before {
		t.Fatal("a region was programmed without its bitstream")
	}
	t.Logf("the claim's error: %v", err)
	checkConsistent(t, n)
}
