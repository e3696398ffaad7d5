package program

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestOpenByContent names a GBS .aocx and an AOCX .gbs: Open must go by
// content.
func TestOpenByContent(t *testing.T) {
	dir := t.TempDir()
	gbs := gbsFile(t, testIf, testAFU, 1001)
	aocx := aocxFile(t, testIf2, testAFU2, 1001)
	gbsPath := writeFile(t, dir, "really.aocx", gbs)
	aocxPath := writeFile(t, dir, "really.gbs", aocx)

	for _, tc := range []struct {
		path   string
		data   []byte
		format Format
		ifID   string
		afuID  string
	}{
		{gbsPath, gbs, FormatGBS, testIf, testAFU},
		{aocxPath, aocx, FormatAOCX, testIf2, testAFU2},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			b, err := Open(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(tc.path)
			if b.Path != tc.path || b.Format != tc.format || b.InterfaceID != tc.ifID || b.AFUID != tc.afuID ||
				b.Size != int64(len(tc.data)) || b.PayloadSize != 1004 || !b.ModTime.Equal(fi.ModTime()) || b.SHA256 != "" {
				t.Errorf("Open = %+v", b)
			}
			if b.Metadata.AFUImage.AcceleratorClusters[0].Name != "test_afu" {
				t.Errorf("metadata = %+v", b.Metadata)
			}
			d, err := Open(tc.path, WithDigest())
			if err != nil {
				t.Fatal(err)
			}
			if d.SHA256 != sha256Hex(tc.data) {
				t.Errorf("SHA256 = %s, want %s", d.SHA256, sha256Hex(tc.data))
			}
		})
	}
}

func TestReadPayloadPadsToFour(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string][]byte{
		"gbs":  rawGBS(metaJSON(testIf, "["+cluster(testAFU)+"]"), []byte("12345")),
		"aocx": aocxOf(t, aocxBinSection, aocxGBSSection, gzipped(t, rawGBS(metaJSON(testIf, "["+cluster(testAFU)+"]"), []byte("12345")))),
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Open(writeFile(t, dir, name, data))
			if err != nil {
				t.Fatal(err)
			}
			if b.PayloadSize != 5 {
				t.Errorf("PayloadSize = %d, want 5 (unpadded)", b.PayloadSize)
			}
			p, err := b.ReadPayload("")
			if err != nil {
				t.Fatal(err)
			}
			if want := []byte("12345\x00\x00\x00"); !bytes.Equal(p, want) {
				t.Errorf("payload = %q, want %q", p, want)
			}
		})
	}
}

func TestReadPayloadChecksumPin(t *testing.T) {
	data := gbsFile(t, testIf, testAFU, 64)
	b, err := Open(writeFile(t, t.TempDir(), "a.gbs", data))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256Hex(data)
	for _, pin := range []string{sum, "sha256:" + sum, strings.ToUpper(sum)} {
		if _, err := b.ReadPayload(pin); err != nil {
			t.Errorf("pin %q: %v", pin, err)
		}
	}
	wrong := strings.Repeat("ab", 32)
	_, err = b.ReadPayload(wrong)
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("wrong pin: got %v, want ErrChecksumMismatch", err)
	}
	wantErr(t, err, "has sha256 "+sum, "want "+wrong)
	wantErr(t, func() error { _, err := b.ReadPayload("abc"); return err }(), `sha256 pin "abc" is not 64 hex digits`)
}

func TestReadPayloadDetectsChangedFile(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(writeFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU, 64)))
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU2, 64))
	_, err = b.ReadPayload("")
	if !errors.Is(err, ErrBitstreamChanged) {
		t.Fatalf("got %v, want ErrBitstreamChanged", err)
	}
	wantErr(t, err, "AFU "+testAFU, "AFU "+testAFU2)

	// Replaced by the same AFU, rebuilt: still loadable.
	replaceFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU, 128))
	if p, err := b.ReadPayload(""); err != nil || len(p) != 128 {
		t.Fatalf("rebuilt same AFU: %d bytes, %v", len(p), err)
	}
}

func TestOpenRefusesNonRegularAndLarge(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.gbs")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	big := writeFile(t, dir, "big.gbs", gbsFile(t, testIf, testAFU, 4096))
	for name, tc := range map[string]struct {
		path string
		opts []OpenOption
		want string
	}{
		// A FIFO would block a plain open: Open must refuse it at once.
		"fifo":      {fifo, nil, "is not a regular file"},
		"directory": {dir, nil, "is not a regular file"},
		"over cap":  {big, []OpenOption{WithMaxFileSize(1000)}, "more than the 1000-byte limit"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Open(tc.path, tc.opts...)
			wantErr(t, err, tc.want)
			if !errors.Is(err, ErrInvalidBitstream) {
				t.Errorf("error %q does not match ErrInvalidBitstream", err)
			}
		})
	}
	_, err := Open(filepath.Join(dir, "missing.gbs"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want ErrNotExist", err)
	}
	// The cap also guards ReadPayload, e.g. when the file grew.
	b, err := Open(big, WithMaxFileSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "big.gbs", gbsFile(t, testIf, testAFU, 2<<20))
	_, err = b.ReadPayload("")
	wantErr(t, err, "more than the 1048576-byte limit")
}

// BenchmarkBitstreamVerify measures ReadPayload with a sha256 pin on a
// 64 MiB GBS: the read, hash and re-parse Load does before programming.
// Compare its throughput with `sha256sum` on a file of the same size.
func BenchmarkBitstreamVerify(b *testing.B) {
	benchmarkVerify(b, "big.gbs", gbsWithPayload(b, testIf, testAFU, benchPayload(64<<20)))
}

// benchPayload returns n bytes of filler for the verify benchmarks.
func benchPayload(n int) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	return payload
}

// benchmarkVerify measures ReadPayload with a sha256 pin on the bitstream
// data, written to a file called name, from the page cache.
func benchmarkVerify(b *testing.B, name string, data []byte) {
	path := writeFile(b, b.TempDir(), name, data)
	bs, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	pin := sha256Hex(data)
	if _, err := bs.ReadPayload(pin); err != nil { // warm the page cache
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := bs.ReadPayload(pin); err != nil {
			b.Fatal(err)
		}
	}
}
