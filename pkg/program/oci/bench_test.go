package oci

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/internal/registrytest"
)

// benchSize is the size of the benchmarks' bitstream.
const benchSize = 64 << 20

// benchArtifact starts a registry and pushes a 64 MiB GBS to it, once per
// benchmark.
func benchArtifact(b *testing.B) (*registrytest.Registry, string, *Pushed) {
	b.Helper()
	r := registrytest.Start(b, registrytest.Config{})
	file := writeGBS(b, testIf, testAFU, benchSize)
	pushed := push(b, newClient(b, registryOptions(r)), r, file, "bench/nlb0:v1")
	return r, file, pushed
}

// BenchmarkPullVerify64MiB pulls a 64 MiB bitstream from a local registry
// into an empty cache and verifies it (manifest digest, layer digest and
// size, header against annotations) (pulls/op: 1).
func BenchmarkPullVerify64MiB(b *testing.B) {
	r, _, pushed := benchArtifact(b)
	b.SetBytes(pushed.Size)
	withEmptyCache(b, r, func(p *Puller) {
		if _, err := p.Fetch(b.Context(), pushed.Reference, FetchOptions{}); err != nil {
			b.Fatal(err)
		}
	})
}

// withEmptyCache runs fetch b.N times, each time with a Puller on an empty
// cache, timing fetch alone, and reports the pulls made per run.
func withEmptyCache(b *testing.B, r *registrytest.Registry, fetch func(p *Puller)) {
	var pulls int64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		p := newPuller(b, r, dir, nil)
		b.StartTimer()
		fetch(p)
		b.StopTimer()
		pulls += p.Stats().Pulls
		p.Close()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(pulls)/float64(b.N), "pulls/op")
}

// BenchmarkFetchCached64MiB fetches a 64 MiB bitstream the cache holds:
// no registry, the file hashed again.
func BenchmarkFetchCached64MiB(b *testing.B) {
	r, _, pushed := benchArtifact(b)
	p := newPuller(b, r, "", nil)
	if _, err := p.Fetch(b.Context(), pushed.Reference, FetchOptions{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(pushed.Size)
	b.ResetTimer()
	for range b.N {
		if f, err := p.Fetch(b.Context(), pushed.Reference, FetchOptions{}); err != nil || !f.FromCache {
			b.Fatal(f, err)
		}
	}
}

// BenchmarkCp64MiB runs cp(1) on the same 64 MiB file: the floor of getting
// the bytes into a file on this machine, without a network or a hash.
func BenchmarkCp64MiB(b *testing.B) {
	src := writeGBS(b, testIf, testAFU, benchSize)
	dst := filepath.Join(b.TempDir(), "copy.gbs")
	fi, _ := os.Stat(src)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	for range b.N {
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v: %s", err, out)
		}
		b.StopTimer()
		os.Remove(dst)
		b.StartTimer()
	}
}

// BenchmarkSha256sum64MiB runs sha256sum(1) on the same 64 MiB file: the
// cost of the verification alone.
func BenchmarkSha256sum64MiB(b *testing.B) {
	src := writeGBS(b, testIf, testAFU, benchSize)
	fi, _ := os.Stat(src)
	b.SetBytes(fi.Size())
	b.ResetTimer()
	for range b.N {
		if out, err := exec.Command("sha256sum", src).CombinedOutput(); err != nil {
			b.Fatalf("sha256sum: %v: %s", err, out)
		}
	}
}

// BenchmarkConcurrent8SameDigest64MiB has 8 claims fetch the same 64 MiB
// bitstream at once into an empty cache: one pull serves them all, so the
// time is close to BenchmarkPullVerify64MiB's (pulls/op: 1).
func BenchmarkConcurrent8SameDigest64MiB(b *testing.B) {
	r, _, pushed := benchArtifact(b)
	withEmptyCache(b, r, func(p *Puller) {
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				if _, err := p.Fetch(b.Context(), pushed.Reference, FetchOptions{Holder: "claim-" + string(rune('a'+c))}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	})
}
