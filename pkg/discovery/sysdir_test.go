package discovery

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
)

// TestEntriesMatchReadDir lists a directory through getdents64 and
// compares names and inode numbers with what stat reports.
func TestEntriesMatchReadDir(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for _, name := range []string{"dfl-fme.0", "dfl-port.0", "a-much-longer-name-that-needs-more-padding", "x"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	d, err := openSysDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	got, err := d.entries()
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].name < got[j].name })
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for i, e := range got {
		fi, err := os.Stat(filepath.Join(dir, want[i]))
		if err != nil {
			t.Fatal(err)
		}
		if e.name != want[i] || e.ino != fi.Sys().(*syscall.Stat_t).Ino {
			t.Errorf("entry %d is %+v, want %s with inode %d", i, e, want[i], fi.Sys().(*syscall.Stat_t).Ino)
		}
	}
	// A view lists its child through the parent's descriptor.
	if err := os.WriteFile(filepath.Join(dir, "x", "temp1_input"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := d.sub("x").names()
	if err != nil || len(names) != 1 || names[0] != "temp1_input" {
		t.Fatalf("sub view names %v, %v", names, err)
	}
}

// dirent encodes one linux_dirent64 record, padded to 8 bytes.
func dirent(ino uint64, name string) []byte {
	reclen := (19 + len(name) + 1 + 7) &^ 7
	b := make([]byte, reclen)
	binary.NativeEndian.PutUint64(b[0:8], ino)
	binary.NativeEndian.PutUint16(b[16:18], uint16(reclen))
	copy(b[19:], name)
	return b
}

func FuzzParseDirents(f *testing.F) {
	f.Add(bytes.Join([][]byte{dirent(1, "."), dirent(2, ".."), dirent(7, "dfl-port.0")}, nil))
	f.Add(dirent(3, "region1")[:20])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		entries := parseDirents(b, nil)
		if len(entries) > len(b)/20 {
			t.Fatalf("%d entries from %d bytes", len(entries), len(b))
		}
		for _, e := range entries {
			if e.name == "" || e.name == "." || e.name == ".." || bytes.IndexByte([]byte(e.name), 0) >= 0 {
				t.Fatalf("bad entry %q", e.name)
			}
		}
	})
}

// TestAncestor reads a file of an ancestor directory through a view of a
// descendant's open directory, and refuses paths that are not ancestors.
func TestAncestor(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "pci", "fpga_region", "region0")
	if err := os.MkdirAll(filepath.Join(deep, "dfl-fme.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	pci := filepath.Join(root, "pci")
	if err := os.WriteFile(filepath.Join(pci, "vendor"), []byte("0x8086\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := openSysDir(deep)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	for _, from := range []sysDir{d, d.sub("dfl-fme.0")} {
		a, ok := from.ancestor(pci)
		if !ok {
			t.Fatalf("%s: %s is not an ancestor", from.path, pci)
		}
		if v, err := a.read("vendor"); err != nil || v != "0x8086" {
			t.Errorf("read vendor through %s (rel %q): %q, %v", from.path, a.rel, v, err)
		}
		if a.path != pci {
			t.Errorf("view path %s, want %s", a.path, pci)
		}
	}
	if a, ok := d.ancestor(deep); !ok || a.rel != "" {
		t.Errorf("ancestor(itself) = %+v, %v; want the directory itself", a, ok)
	}
	for _, path := range []string{filepath.Join(root, "pc"), filepath.Join(deep, "dfl-fme.0"), "", filepath.Join(root, "other")} {
		if _, ok := d.ancestor(path); ok {
			t.Errorf("ancestor(%q) of %s: ok, want refused", path, d.path)
		}
	}
}

// TestTrackerNamesWhatIsRead: a tracked view notes the whole path of what
// it reads last: an attribute of a child view, an attribute by path
// outside the view, and a directory it lists.
func TestTrackerNamesWhatIsRead(t *testing.T) {
	root := t.TempDir()
	port := filepath.Join(root, "dfl-port.1")
	if err := os.Mkdir(port, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(port, "afu_id"), []byte("00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "dev_offline")
	if err := os.WriteFile(outside, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := openSysDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	tr := &Tracker{}
	d = d.tracked(tr)
	for _, step := range []struct {
		do   func() error
		want string
	}{
		{func() error { _, err := d.sub("dfl-port.1").read("afu_id"); return err }, filepath.Join(port, "afu_id")},
		{func() error { _, err := d.readPath(outside); return err }, outside},
		{func() error { _, err := d.sub("dfl-port.1").names(); return err }, port},
	} {
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		if got := tr.current(); got != step.want {
			t.Fatalf("tracker names %q, want %q", got, step.want)
		}
	}
}
