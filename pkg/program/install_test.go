package program

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTestGBS(t *testing.T, path, ifID, afu string, fill byte) {
	t.Helper()
	payload, err := SimPayload(afu, 64)
	if err != nil {
		t.Fatal(err)
	}
	payload[len(payload)-1] = fill
	var b bytes.Buffer
	if err := WriteGBS(&b, NewGBSMetadata(ifID, afu, "t"), payload); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInstall(t *testing.T) {
	const ifID, afu = "69528db6eb31577a8c3668f9faa081f6", "d8424dc4a4a3c413f89e433683f9040b"
	repo, src := t.TempDir(), filepath.Join(t.TempDir(), "build-output.gbs")
	writeTestGBS(t, src, ifID, afu, 1)
	bs, err := Install(repo, src, false)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(ifID, afu+".gbs")
	if bs.Name != want {
		t.Fatalf("installed as %q, want %q", bs.Name, want)
	}
	// The node's repository finds it by its IDs.
	r, err := NewRepository(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if found, err := r.Find(ifID, afu); err != nil || found.Name != want {
		t.Fatalf("repository lookup: %v %+v", err, found)
	}
	// Same content again: fine. Different content: refused without force.
	if _, err := Install(repo, src, false); err != nil {
		t.Fatalf("reinstalling the same file: %v", err)
	}
	writeTestGBS(t, src, ifID, afu, 2)
	if _, err := Install(repo, src, false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("overwrite without force: %v", err)
	}
	if _, err := Install(repo, src, true); err != nil {
		t.Fatalf("overwrite with force: %v", err)
	}
	// Not a bitstream: refused, nothing written.
	bad := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(bad, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(repo, bad, true); !errors.Is(err, ErrInvalidBitstream) {
		t.Fatalf("installing a text file: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Join(repo, ifID))
	if len(entries) != 1 {
		t.Fatalf("repository holds %d files, want 1", len(entries))
	}
}

func TestInstallXclbin(t *testing.T) {
	repo := t.TempDir()
	src := writeFile(t, t.TempDir(), "vadd.xclbin", xclbinFile(t, testXIf, testXclbin, 64))
	bs, err := Install(repo, src, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(testXIf, testXclbin+".xclbin"); bs.Name != want || bs.Format != FormatXclbin {
		t.Fatalf("installed as %q (%s), want %q", bs.Name, bs.Format, want)
	}
	writeFile(t, filepath.Dir(src), "vadd.xclbin", xclbinFile(t, testXIf, testXclbin, 128))
	if _, err := Install(repo, src, false); !errors.Is(err, ErrExists) {
		t.Fatalf("overwrite without force: %v", err)
	}
}

// TestInstallAOCXShadowedByGBS: nodes load a GBS before an AOCX of the same
// IDs. Installing an AOCX where a GBS of those IDs is installed must not
// report success while every node keeps loading the GBS: it is refused
// without force, and with force the AOCX is what the repository finds.
func TestInstallAOCXShadowedByGBS(t *testing.T) {
	const ifID, afu = "69528db6eb31577a8c3668f9faa081f6", "d8424dc4a4a3c413f89e433683f9040b"
	repo, src := t.TempDir(), t.TempDir()
	if _, err := Install(repo, writeFile(t, src, "old.gbs", gbsFile(t, ifID, afu, 64)), false); err != nil {
		t.Fatal(err)
	}
	aocx := writeFile(t, src, "new.aocx", aocxFile(t, ifID, afu, 128))
	if bs, err := Install(repo, aocx, false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), afu+".gbs") {
		t.Fatalf("installing an AOCX a GBS shadows: %v (installed %+v), want ErrExists naming the GBS", err, bs)
	}
	if _, err := Install(repo, aocx, true); err != nil {
		t.Fatalf("with force: %v", err)
	}
	r, err := NewRepository(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	found, err := r.Find(ifID, afu)
	if err != nil || found.Format != FormatAOCX {
		t.Fatalf("after a forced install of the AOCX the repository finds %+v (%v), want the AOCX", found, err)
	}
}

// TestInstallAOCXShadowedByGBSElsewhere: the repository indexes a
// bitstream by the IDs in its header, whatever it is called, and a node
// loads a GBS before an AOCX of the same IDs wherever the GBS lies. An
// AOCX installed while a GBS of those IDs lies under another name must be
// refused as it is when the GBS is at <interfaceID>/<afuID>.gbs, not
// reported installed while every node keeps loading the GBS.
func TestInstallAOCXShadowedByGBSElsewhere(t *testing.T) {
	const ifID, afu = "69528db6eb31577a8c3668f9faa081f6", "d8424dc4a4a3c413f89e433683f9040b"
	repo, src := t.TempDir(), t.TempDir()
	gbs := writeFile(t, repo, "vendor/accel-v1.gbs", gbsFile(t, ifID, afu, 64))
	aocx := writeFile(t, src, "new.aocx", aocxFile(t, ifID, afu, 128))
	if bs, err := Install(repo, aocx, false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), gbs) {
		t.Fatalf("installing an AOCX the GBS %s shadows: %v (installed %+v), want ErrExists naming the GBS", gbs, err, bs)
	}
	if _, err := Install(repo, aocx, true); err != nil {
		t.Fatalf("with force: %v", err)
	}
	r, err := NewRepository(context.Background(), repo)
	if err != nil {
		t.Fatal(err)
	}
	if found, err := r.Find(ifID, afu); err != nil || found.Format != FormatAOCX {
		t.Fatalf("after a forced install of the AOCX the repository finds %+v (%v), want the AOCX", found, err)
	}
}
