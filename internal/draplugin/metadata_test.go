package draplugin_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// TestDeviceMetadataFiles: with device metadata on, a prepare through the
// kubelet's socket leaves the helper's metadata file of the claim's
// request and the CDI spec that mounts it, with the modes the helper asks
// for (both readable by the runtime) and no temporary file beside them
// (they are written by the driver's atomic, unflushed write); the
// unprepare removes both.
func TestDeviceMetadataFiles(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 1}, deviceMetadata: true})
	dra := pn.draClient(t)
	device := pn.driver.Devices().Ports()[0].DeviceName()
	c := pn.claim(t, []string{device})
	if r := pn.prepare(t, dra, c); r.Error != "" {
		t.Fatal(r.Error)
	}
	var written []string
	for _, dir := range []string{filepath.Join(pn.dataDir, "dra-device-metadata"), pn.CDIDir} {
		err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			if strings.HasSuffix(path, ".tmp") {
				t.Errorf("temporary file %s left behind", path)
			}
			if strings.Contains(path, string(c.UID)) || strings.Contains(path, c.Name) {
				written = append(written, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var doc, spec string
	for _, p := range written {
		switch {
		case strings.HasSuffix(p, "metadata.json") && strings.Contains(p, "dra-device-metadata"):
			doc = p
		case strings.Contains(filepath.Base(p), "_metadata_"):
			spec = p
		}
	}
	if doc == "" || spec == "" {
		t.Fatalf("files of claim %s: %v, want its metadata file and the CDI spec that mounts it", c.Name, written)
	}
	for _, p := range []string{doc, spec} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644 as the helper asks", p, st.Mode().Perm())
		}
	}
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var md metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(f), &md); err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	if len(md.Requests) != 1 || len(md.Requests[0].Devices) != 1 || md.Requests[0].Devices[0].Name != device {
		t.Fatalf("metadata %+v, want one request with device %s", md.Requests, device)
	}
	pn.unprepare(t, dra, c)
	for _, p := range []string{doc, spec} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after the unprepare: %v, want it removed", p, err)
		}
	}
}
