package program

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMovedRepositoryStillReads: the repository directory is a symlink;
// the directory it names is renamed and the symlink re-pointed at the new
// name (same files, same inodes, so every file's fingerprint is
// unchanged and the index keeps its entries). A file inside the
// repository is still read: the repository is resolved at each read.
func TestMovedRepositoryStillReads(t *testing.T) {
	base := t.TempDir()
	v1 := filepath.Join(base, "v1")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, v1, "ok.gbs", gbsWithPayload(t, testIf, testAFU, []byte("GOODGOODGOODGOOD")))
	link := filepath.Join(base, "repo")
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	r := newTestRepository(t, link)
	if _, err := r.Find(testIf, testAFU); err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Join(base, "v2")
	if err := os.Rename(v1, v2); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("v2", link); err != nil {
		t.Fatal(err)
	}
	r.refresh(r.generation(), true) // even a forced re-index
	bs, err := r.Find(testIf, testAFU)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.ReadPayload(""); err != nil {
		t.Fatalf("file inside the repository refused: %v", err)
	}
}
