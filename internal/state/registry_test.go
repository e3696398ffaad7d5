package state_test

import (
	"context"
	"errors"
	"fmt"
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
	reg, opts, all := pushBitstreams(t, testnode.NewAFU)
	pushed := all[0]
	ctx := context.Background()
	n, puller := registryNode(t, opts, 0)
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
		BitstreamRef: reg.Host + "/fpga/accel0@sha256:" + strings.Repeat("ab", 32)}
	_, err := n.State.Prepare(ctx, holder("c"), request(ports[0].DeviceName(), missing), devs)
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

// TestAlreadyLoadedFromRegistryHoldsLayer: a claim prepared from an OCI
// reference on a region that carries that very reference already
// (IfNeeded: nothing programmed) records the cached layer and holds it
// like a claim whose job pulled it: the cache evicts it for no other pull
// while the claim is prepared, and may once it is unprepared.
func TestAlreadyLoadedFromRegistryHoldsLayer(t *testing.T) {
	_, opts, pushed := pushBitstreams(t, testnode.NewAFU, testnode.SecondAFU)
	x, y := pushed[0], pushed[1]
	ctx := context.Background()
	// Room for one of the two layers only.
	n, puller := registryNode(t, opts, x.Size+y.Size-1)
	p0 := n.Devices(t).Ports()[0].DeviceName()
	cfg := &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, BitstreamRef: x.Reference, Programming: v1alpha1.ProgrammingIfNeeded}
	prepareUntilDone(t, n.State, holder("a"), request(p0, cfg), n.Devices(t))
	unprepareUntilDone(t, n.State, holder("a").UID)

	calls := n.Programmer.TotalCalls()
	b := holder("b")
	out := prepareUntilDone(t, n.State, b, request(p0, cfg), n.Devices(t))
	if len(out.Programmed) != 0 || n.Programmer.TotalCalls() != calls {
		t.Fatalf("programmed %+v, want nothing: the region carries %s already", out.Programmed, x.Reference)
	}
	rec, _ := n.State.Claim(b.UID)
	if d := rec.Devices[0]; d.LayerDigest != x.LayerDigest || d.Bitstream != x.Reference || d.SHA256 == "" || d.Programmed {
		t.Fatalf("record %+v, want the layer %s of %s, its sha256, and not programmed for the claim", d, x.LayerDigest, x.Reference)
	}

	// While b is prepared its layer stays: the other bitstream finds no
	// room.
	if _, err := puller.Fetch(ctx, y.Reference, oci.FetchOptions{}); !errors.Is(err, oci.ErrCacheFull) {
		t.Fatalf("pull of another bitstream while the claim holds its layer: %v, want %v", err, oci.ErrCacheFull)
	}
	if s := puller.Stats(); s.Evictions != 0 {
		t.Fatalf("puller %+v: the layer of prepared claim %s was evicted", s, b)
	}

	// Once b is unprepared, its layer may go.
	unprepareUntilDone(t, n.State, b.UID)
	if _, err := puller.Fetch(ctx, y.Reference, oci.FetchOptions{}); err != nil {
		t.Fatalf("pull of another bitstream after the claim ended: %v", err)
	}
	if s := puller.Stats(); s.Evictions != 1 {
		t.Fatalf("puller %+v, want the released layer evicted", s)
	}
	checkConsistent(t, n)
}

// TestRegionKeepsItsLayerCached: the layer a region was programmed from
// stays in the OCI cache after its claim ends, while layers no region
// carries are evicted first: a later claim that needs it programmed again
// (here on another region, with the registry down) finds it cached. Once
// a prepare finds the region reset outside the driver, the layer is
// evicted like any other.
func TestRegionKeepsItsLayerCached(t *testing.T) {
	const thirdAFU = "00112233445566778899aabbccddeeff"
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			reg, opts, pushed := pushBitstreams(t, testnode.NewAFU, testnode.SecondAFU, thirdAFU)
			x, y, z := pushed[0], pushed[1], pushed[2]
			ctx := context.Background()
			// Room for two and a half layers.
			n, puller := registryNode(t, opts, x.Size+y.Size+z.Size/2)
			ports := n.Devices(t).Ports()
			p0 := ports[0].DeviceName()
			cfg := &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, BitstreamRef: x.Reference, Programming: v1alpha1.ProgrammingAlways}
			prepareUntilDone(t, n.State, holder("a"), request(p0, cfg), n.Devices(t))
			unprepareUntilDone(t, n.State, holder("a").UID)
			if reset {
				_, port, err := n.Sim.Port(ports[0].Node.Name)
				if err != nil {
					t.Fatal(err)
				}
				if err := n.Sim.SetAFUID(port, simnode.DefaultAFUID); err != nil {
					t.Fatal(err)
				}
				prepareUntilDone(t, n.State, holder("b"), request(p0, ask(simnode.DefaultAFUID, v1alpha1.ProgrammingNever)), n.Devices(t))
				unprepareUntilDone(t, n.State, holder("b").UID)
			}

			// Two other pulls, the second of which needs room: x is the
			// least recently used layer.
			for _, other := range []*oci.Pushed{y, z} {
				if _, err := puller.Fetch(ctx, other.Reference, oci.FetchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if s := puller.Stats(); s.Evictions != 1 {
				t.Fatalf("puller %+v, want one eviction", s)
			}
			reg.Stop()
			if reset {
				if _, err := puller.Fetch(ctx, y.Reference, oci.FetchOptions{}); err != nil {
					t.Fatalf("%s, used after the region's layer, which no region carries any more, was evicted instead: %v", y.Reference, err)
				}
				return
			}
			out := prepareUntilDone(t, n.State, holder("c"), request(ports[1].DeviceName(), cfg), n.Devices(t))
			if len(out.Programmed) != 1 || out.Programmed[0].Err != nil || out.Programmed[0].LayerDigest != x.LayerDigest {
				t.Fatalf("programmed %+v, want %s from the cache", out.Programmed, x.Reference)
			}
			checkConsistent(t, n)
		})
	}
}

// pushBitstreams starts a registry and pushes to it a bitstream for each
// of afus, in order.
func pushBitstreams(t *testing.T, afus ...string) (*registrytest.Registry, oci.RegistryOptions, []*oci.Pushed) {
	t.Helper()
	reg := registrytest.Start(t, registrytest.Config{})
	opts := oci.RegistryOptions{Insecure: []string{reg.Host}}
	client, err := oci.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	var pushed []*oci.Pushed
	for i, afu := range afus {
		src := filepath.Join(t.TempDir(), "accel.gbs")
		testnode.WriteBitstream(t, src, simnode.DefaultInterfaceID, afu)
		p, err := client.Push(context.Background(), src, fmt.Sprintf("%s/fpga/accel%d:v1", reg.Host, i))
		if err != nil {
			t.Fatal(err)
		}
		pushed = append(pushed, p)
	}
	return reg, opts, pushed
}

// registryNode is a restored two-card node that pulls bitstreams from
// opts through a cache of cacheSize bytes (the default when 0).
func registryNode(t *testing.T, opts oci.RegistryOptions, cacheSize int64) (*testnode.Node, *oci.Puller) {
	t.Helper()
	ctx := context.Background()
	puller, err := oci.NewPuller(ctx, oci.PullerOptions{Registry: opts, CacheDir: t.TempDir(), CacheSize: cacheSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { puller.Close() })
	n := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}, Registry: puller, NoRestore: true})
	if _, err := n.State.Restore(ctx, n.Devices(t)); err != nil {
		t.Fatal(err)
	}
	return n, puller
}

// TestAllowedRegistriesAfterProgrammedBeforeBinding: a claim whose
// region was programmed before binding from a registry that the daemon,
// restarted with --allowed-registries, no longer allows is refused when the
// kubelet prepares it, as any claim naming that registry is: no pod gets a
// region carrying a bitstream of a registry the node refuses.
func TestAllowedRegistriesAfterProgrammedBeforeBinding(t *testing.T) {
	_, opts, pushed := pushBitstreams(t, testnode.NewAFU)
	ctx := context.Background()
	n, puller := registryNode(t, opts, 0)
	devs := n.Devices(t)
	dev := devs.Ports()[0].DeviceName()
	a := holder("a")
	reqs := request(dev, &v1alpha1.FpgaConfig{AFUID: testnode.NewAFU, BitstreamRef: pushed[0].Reference, Programming: v1alpha1.ProgrammingIfNeeded})
	for {
		_, err := n.State.Prepare(ctx, a, reqs, devs, state.BeforeBinding())
		if err == nil {
			break
		}
		if !errors.Is(err, state.ErrInProgress) {
			t.Fatalf("prepare before binding: %v", err)
		}
	}
	if rec, _ := n.State.Claim(a.UID); rec.Phase != state.PhaseProgrammed {
		t.Fatalf("phase %s, want %s", rec.Phase, state.PhaseProgrammed)
	}
	// The admin restricts the node's registries; the daemon restarts.
	n.Stop()
	if err := puller.Close(); err != nil {
		t.Fatal(err)
	}
	restricted := opts
	restricted.Allowed = []string{"registry.example.com"}
	p2, err := oci.NewPuller(ctx, oci.PullerOptions{Registry: restricted, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p2.Close() })
	n2 := testnode.New(t, testnode.Options{Sim: simnode.Options{Cards: 2}, Restart: n, Registry: p2})
	_, err = n2.State.Prepare(ctx, a, reqs, n2.Devices(t))
	if !errors.Is(err, oci.ErrNotAllowed) {
		t.Fatalf("kubelet prepare of a claim naming a registry outside --allowed-registries: %v, want %v", err, oci.ErrNotAllowed)
	}
}
