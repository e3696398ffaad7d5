// Command ociimage builds a container image from static binaries without a
// container engine and writes it as an OCI image layout archive (tar), which
// "ctr images import", "docker load" and "podman load" read. The image is
// the same as the Dockerfile's: the binaries below /usr/bin on an empty
// base. Its digest depends only on the binaries and the flags: file times
// and the creation time come from $SOURCE_DATE_EPOCH (0 when unset).
//
// Usage:
//
//	go run . --image ghcr.io/fpga-dra/fpga-dra-driver:0.1.0 --platform linux/amd64 \
//	  --file /usr/bin/fpga-dra-driver=../../_output/bin/linux-amd64/fpga-dra-driver \
//	  --entrypoint /usr/bin/fpga-dra-driver --output image.tar
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fileList collects repeated --file IMAGE_PATH=LOCAL_PATH flags.
type fileList map[string]string

func (f fileList) String() string { return fmt.Sprint(map[string]string(f)) }

func (f fileList) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || !path.IsAbs(dst) || src == "" {
		return fmt.Errorf("--file %q: want /absolute/path/in/image=local/file", v)
	}
	f[path.Clean(dst)] = src
	return nil
}

func main() {
	files := fileList{}
	var (
		image      = flag.String("image", "", "image reference the archive names, e.g. ghcr.io/fpga-dra/fpga-dra-driver:0.1.0 (required)")
		platform   = flag.String("platform", "linux/amd64", "os/arch[/variant] of the binaries")
		entrypoint = flag.String("entrypoint", "", "the image's entrypoint (a path in the image)")
		output     = flag.String("output", "", "archive to write (required)")
		labels     = flag.String("labels", "", "comma-separated key=value image labels")
	)
	flag.Var(files, "file", "IMAGE_PATH=LOCAL_PATH: a file to put in the image, executable (repeatable)")
	flag.Parse()
	if err := build(*image, *platform, *entrypoint, *output, *labels, files); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func build(image, platform, entrypoint, output, labels string, files fileList) error {
	if image == "" || output == "" || len(files) == 0 {
		return errors.New("--image, --output and at least one --file are required")
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	plat, err := v1.ParsePlatform(platform)
	if err != nil {
		return fmt.Errorf("--platform: %w", err)
	}
	created, err := sourceDate()
	if err != nil {
		return err
	}
	layerTar, err := layerOf(files, created)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "hack/ociimage", Comment: "static binaries"},
	})
	if err != nil {
		return fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = plat.OS, plat.Architecture, plat.Variant
	cfg.Created = v1.Time{Time: created}
	cfg.Config.Env = []string{"PATH=/usr/bin"}
	if entrypoint != "" {
		cfg.Config.Entrypoint = []string{entrypoint}
	}
	cfg.Config.Labels = map[string]string{}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			cfg.Config.Labels[k] = v
		}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return writeArchive(output, ref, img, plat)
}

// sourceDate is $SOURCE_DATE_EPOCH, or the Unix epoch.
func sourceDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("$SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// layerOf returns an uncompressed tar of files (and their parent
// directories), root-owned, executable, dated mtime, in a fixed order.
func layerOf(files fileList, mtime time.Time) ([]byte, error) {
	dirs := map[string]bool{}
	var names []string
	for dst := range files {
		names = append(names, dst)
		for d := path.Dir(dst); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		names = append(names, d+"/")
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		hdr := &tar.Header{Name: strings.TrimPrefix(n, "/"), ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(n, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		data, err := os.ReadFile(files[n])
		if err != nil {
			return nil, fmt.Errorf("--file %s: %w", n, err)
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o755, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as an OCI image layout in a tar file. The index
// entry carries the full reference (io.containerd.image.name, which ctr
// and docker use to name the import) and the tag
// (org.opencontainers.image.ref.name).
func writeArchive(output string, ref name.Reference, img v1.Image, plat *v1.Platform) error {
	dir, err := os.MkdirTemp("", "ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	annotations := map[string]string{
		"io.containerd.image.name":          ref.Name(),
		"org.opencontainers.image.ref.name": ref.Identifier(),
	}
	if err := p.AppendImage(img, layout.WithAnnotations(annotations), layout.WithPlatform(*plat)); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(output), 0o755); err != nil {
		return err
	}
	tmp := output + ".tmp"
	if err := tarDir(dir, tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, output); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", output, ref.Name(), digest)
	return nil
}

// tarDir writes the files below dir into a tar at out, in a fixed order.
func tarDir(dir, out string) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if st.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			continue
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
