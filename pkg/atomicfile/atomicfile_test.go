package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(path, []byte("one"), Options{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v mode %v, want 0600", err, fi.Mode())
	}
	for name, o := range map[string]Options{
		"check":  {Check: func(string) error { return errors.New("refused") }},
		"rename": {Rename: func(string, string) error { return errors.New("injected") }},
	} {
		if err := Write(path, []byte("two"), o); err == nil {
			t.Fatalf("%s failure: write succeeded", name)
		}
		if b, _ := os.ReadFile(path); string(b) != "one" {
			t.Fatalf("%s failure changed the file to %q", name, b)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, ".state.json.123.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveStale(path); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("RemoveStale left %v", entries)
	}
}
