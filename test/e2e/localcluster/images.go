package localcluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Images the cluster imports into containerd.
const (
	// PauseImage is the sandbox image containerd 2.4 pins by default.
	PauseImage = "registry.k8s.io/pause:3.10.2"
	// ProbeImage prints the container's FPGA view (test/e2e/images/probe).
	ProbeImage = "fpga-dra.dev/e2e-probe:latest"
)

// buildImage compiles the static Go command at pkg (a path below the
// repository) and writes an OCI image archive running it as its entrypoint.
func buildImage(repo, pkg, ref, out string) error {
	bin := out + ".bin"
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./"+pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	defer os.Remove(bin)
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	name := "/" + filepath.Base(pkg)
	return writeOCIArchive(out, ref, map[string][]byte{name: data}, []string{name})
}

// writeOCIArchive writes an OCI image layout as a tar file holding one
// single-layer linux/amd64 image tagged ref, as "ctr images import" reads.
func writeOCIArchive(path, ref string, files map[string][]byte, entrypoint []string) error {
	// The layer: a gzipped tar of the files, executable.
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for name, data := range files {
		hdr := &tar.Header{Name: strings.TrimPrefix(name, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	diffID := sha256.Sum256(raw.Bytes())
	var layer bytes.Buffer
	gz := gzip.NewWriter(&layer)
	if _, err := gz.Write(raw.Bytes()); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	})
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	desc := func(mediaType string, b []byte) map[string]any {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        desc("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{desc("application/vnd.oci.image.layer.v1.tar+gzip", layer.Bytes())},
	})
	if err != nil {
		return err
	}
	md := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	tag := ref[strings.LastIndex(ref, ":")+1:]
	md["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}
	md["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{md},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	out := tar.NewWriter(f)
	add := func(name string, b []byte) error {
		if err := out.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := out.Write(b)
		return err
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	for d, b := range blobs {
		if err := add("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b); err != nil {
			return err
		}
	}
	return out.Close()
}
