package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

func newTestRepository(t testing.TB, dir string, opts ...RepositoryOption) *Repository {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	r, err := NewRepository(ctx, dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(bs []*Bitstream) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	return out
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (r *Repository) generation() uint64 { return r.snapshot().generation }

// TestRepositoryIndexesByHeader gives files misleading names: lookups must
// follow the headers.
func TestRepositoryIndexesByHeader(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "notes.txt", gbsFile(t, testIf, testAFU, 64))                // a GBS without the extension
	writeFile(t, dir, testIf+"/"+testAFU2+".gbs", gbsFile(t, testIf, testAFU, 64)) // Intel layout, wrong AFU in the name
	writeFile(t, dir, "sub/dir/opencl.bin", aocxFile(t, testIf2, testAFU2, 64))    // an AOCX with another name
	writeFile(t, dir, "README.md", []byte("# bitstreams\n"))                       // not a bitstream
	writeFile(t, dir, "broken.gbs", []byte(gbsMagic+"\x00\x00\x00\x00"))           // a broken one
	writeFile(t, dir, ".hidden/x.gbs", gbsFile(t, testIf2, testAFU, 64))           // skipped: dot directory
	r := newTestRepository(t, dir)

	if got, want := names(r.List()), []string{testIf + "/" + testAFU2 + ".gbs", "notes.txt", "sub/dir/opencl.bin"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	b, err := r.Find(testIf2, "F7DF405C-BD7A-CF72-22F1-44B0B93ACD18")
	if err != nil {
		t.Fatal(err)
	}
	if b.Format != FormatAOCX || b.Name != "sub/dir/opencl.bin" || b.Path != filepath.Join(dir, "sub/dir/opencl.bin") {
		t.Errorf("Find = %+v", b)
	}

	_, err = r.Find(testIf, testAFU2)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	wantErr(t, err, "no bitstream for AFU "+testAFU2+" with interface "+testIf+" in "+dir,
		"found it only for interfaces ["+testIf2+"]", "2 files were skipped")

	_, err = r.Find(testIf2, testAFU)
	wantErr(t, err, "found it only for interfaces ["+testIf+"]")
	_, err = r.Find(testIf, "0000000000000000000000000000abcd")
	wantErr(t, err, "holds 3 bitstreams, none for that AFU")
	_, err = r.Find("xyz", testAFU)
	wantErr(t, err, "interface ID", `"xyz"`)
}

func TestRepositoryPrefersGBSThenNewest(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Hour)
	newer := time.Now().Add(-time.Hour)
	// Intel layout with both formats.
	writeFile(t, dir, testIf+"/"+testAFU+".aocx", aocxFile(t, testIf, testAFU, 64))
	gbs := writeFile(t, dir, testIf+"/"+testAFU+".gbs", gbsFile(t, testIf, testAFU, 64))
	// Two GBS files for another AFU: the newer wins.
	a := writeFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU2, 64))
	b := writeFile(t, dir, "b.gbs", gbsFile(t, testIf, testAFU2, 64))
	for p, mt := range map[string]time.Time{gbs: old, a: newer, b: old} {
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	r := newTestRepository(t, dir)
	if got, err := r.Find(testIf, testAFU); err != nil || got.Format != FormatGBS {
		t.Errorf("Find = %+v, %v; want the (older) .gbs over the .aocx", got, err)
	}
	if got, err := r.Find(testIf, testAFU2); err != nil || got.Name != "a.gbs" {
		t.Errorf("Find = %+v, %v; want the newer a.gbs", got, err)
	}
	// Remove the GBS: the AOCX takes over after the refresh the stale hit
	// triggers.
	if err := os.Remove(gbs); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Find(testIf, testAFU); err != nil || got.Format != FormatAOCX {
		t.Errorf("after removing the .gbs: Find = %+v, %v; want the .aocx", got, err)
	}
}

func TestRepositoryRefreshOnMissIsRateLimited(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "sub/a.gbs", gbsFile(t, testIf, testAFU, 64))
	ageTree(t, dir)
	r := newTestRepository(t, dir)
	clock := &fakeClock{now: r.snapshot().scannedAt}
	r.now = clock.Now
	gen := r.generation()

	// A miss with no directory change and within the interval: no rescan.
	for range 10 {
		if _, err := r.Find(testIf, testAFU2); !errors.Is(err, ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound", err)
		}
	}
	if r.generation() != gen {
		t.Fatalf("misses rescanned %d times, want none within the interval", r.generation()-gen)
	}
	// Once the interval passed, a miss rescans once.
	clock.Step(DefaultRescanInterval)
	_, _ = r.Find(testIf, testAFU2)
	if r.generation() != gen+1 {
		t.Fatalf("generation %d, want %d after the interval", r.generation(), gen+1)
	}
	// A file added to a subdirectory changes its mtime: the next miss
	// rescans at once, whatever the clock says.
	writeFile(t, dir, "sub/b.gbs", gbsFile(t, testIf, testAFU2, 64))
	if b, err := r.Find(testIf, testAFU2); err != nil || b.Name != "sub/b.gbs" {
		t.Fatalf("after adding a file: %+v, %v", b, err)
	}
}

func TestRepositorySeesReplacedFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "x.gbs", gbsFile(t, testIf, testAFU, 64))
	ageTree(t, dir)
	r := newTestRepository(t, dir)
	clock := &fakeClock{now: r.snapshot().scannedAt}
	r.now = clock.Now
	if _, err := r.Find(testIf, testAFU); err != nil {
		t.Fatal(err)
	}

	// Replaced with a rename: the hit goes stale and the index follows.
	replaceFile(t, dir, "x.gbs", gbsFile(t, testIf, testAFU2, 64))
	if _, err := r.Find(testIf, testAFU); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old AFU after replacement: got %v, want ErrNotFound", err)
	}
	if b, err := r.Find(testIf, testAFU2); err != nil || b.Name != "x.gbs" {
		t.Fatalf("new AFU after replacement: %+v, %v", b, err)
	}

	// Rewritten in place (same inode, same size): the mtime tells.
	writeFile(t, dir, "x.gbs", gbsFile(t, testIf2, testAFU2, 64))
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "x.gbs"), later, later); err != nil {
		t.Fatal(err)
	}
	if b, err := r.Find(testIf2, testAFU2); err != nil || b.InterfaceID != testIf2 {
		t.Fatalf("after in-place rewrite: %+v, %v", b, err)
	}
}

func TestRepositoryParsesOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU, 64))
	writeFile(t, dir, "b.gbs", gbsFile(t, testIf, testAFU2, 64))
	r := newTestRepository(t, dir, WithRescanInterval(0))
	before := r.snapshot().files
	writeFile(t, dir, "c.gbs", gbsFile(t, testIf2, testAFU, 64))
	if _, err := r.Find(testIf2, testAFU); err != nil {
		t.Fatal(err)
	}
	after := r.snapshot().files
	for _, n := range []string{"a.gbs", "b.gbs"} {
		if before[n].bs != after[n].bs {
			t.Errorf("%s was parsed again though it did not change", n)
		}
	}
}

func TestRepositoryMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bitstreams")
	r := newTestRepository(t, dir)
	_, err := r.Find(testIf, testAFU)
	wantErr(t, err, "the repository cannot be read", "create it")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want ErrNotFound", err)
	}
	// The directory appears: the next miss sees it without waiting.
	writeFile(t, dir, "a.gbs", gbsFile(t, testIf, testAFU, 64))
	if _, err := r.Find(testIf, testAFU); err != nil {
		t.Fatal(err)
	}

	file := writeFile(t, t.TempDir(), "file", []byte("x"))
	_, err = NewRepository(context.Background(), file)
	wantErr(t, err, "is not a directory")
}

func TestRepositorySymlinks(t *testing.T) {
	outside := t.TempDir()
	target := writeFile(t, outside, "evil.gbs", gbsFile(t, testIf, testAFU2, 64))
	dir := t.TempDir()
	inside := writeFile(t, dir, "store/real.gbs", gbsFile(t, testIf, testAFU, 64))
	for link, to := range map[string]string{"inside.gbs": inside, "escape.gbs": target, "storelink": filepath.Join(dir, "store"), "dangling.gbs": filepath.Join(dir, "nope")} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	r := newTestRepository(t, dir)

	if got, want := names(r.List()), []string{"inside.gbs", "store/real.gbs"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q (no escaping or dangling link, no directory link)", got, want)
	}
	if _, err := r.Find(testIf, testAFU2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a bitstream outside the repository was found: %v", err)
	}
	b, err := r.FindByName("inside.gbs", "")
	if err != nil {
		t.Fatal(err)
	}
	if b.Path != inside || b.Name != "inside.gbs" {
		t.Errorf("FindByName(inside.gbs) = %+v, want Path %s", b, inside)
	}
	if b, err := r.FindByName("storelink/real.gbs", testIf); err != nil || b.Path != inside {
		t.Errorf("FindByName through a directory link = %+v, %v", b, err)
	}
	_, err = r.FindByName("escape.gbs", "")
	wantErr(t, err, `"escape.gbs"`, "resolves to "+target, "outside the repository")
	_, err = r.FindByName("dangling.gbs", "")
	wantErr(t, err, "symlink whose target does not exist")
}

func TestRepositoryFindByName(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "afus/a.gbs", gbsFile(t, testIf, testAFU, 64))
	writeFile(t, dir, "afus/bad.gbs", []byte("XeonFPGA"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newTestRepository(t, dir)

	b, err := r.FindByName("afus/./a.gbs", "69528DB6-EB31-577A-8C36-68F9FAA081F6")
	if err != nil || b.AFUID != testAFU || b.Name != "afus/a.gbs" {
		t.Fatalf("FindByName = %+v, %v", b, err)
	}
	for name, tc := range map[string]struct {
		file, ifID string
		want       string
		is         error
	}{
		"absolute":      {filepath.Join(dir, "afus/a.gbs"), "", "is an absolute path", nil},
		"dot-dot":       {"afus/../../etc/passwd", "", `contains ".."`, nil},
		"empty":         {"", "", "name is empty", nil},
		"missing":       {"afus/none.gbs", "", `no file "afus/none.gbs" in the bitstream repository`, ErrNotFound},
		"directory":     {"afus", "", "is not a regular file", ErrInvalidBitstream},
		"fifo":          {"fifo", "", "is not a regular file", ErrInvalidBitstream},
		"invalid":       {"afus/bad.gbs", "", "shorter than the 20-byte GBS header", ErrInvalidBitstream},
		"other FIM":     {"afus/a.gbs", testIf2, "is built for interface " + testIf + ", not " + testIf2, ErrInterfaceMismatch},
		"bad interface": {"afus/a.gbs", "zz", "interface ID", nil},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.FindByName(tc.file, tc.ifID)
			wantErr(t, err, tc.want)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not match %v", err, tc.is)
			}
		})
	}

	// A file added after indexing is found by name.
	writeFile(t, dir, "afus/new.gbs", gbsFile(t, testIf, testAFU2, 64))
	if b, err := r.FindByName("afus/new.gbs", ""); err != nil || b.AFUID != testAFU2 {
		t.Fatalf("new file: %+v, %v", b, err)
	}
}

// TestRepositoryConcurrentUse runs lookups while a file is replaced over
// and over; run it with -race.
func TestRepositoryConcurrentUse(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "stable.gbs", gbsFile(t, testIf, testAFU, 64))
	versions := [][]byte{gbsFile(t, testIf, testAFU2, 64), gbsFile(t, testIf2, testAFU2, 64)}
	r := newTestRepository(t, dir, WithRescanInterval(0))
	errs := make(chan error, 16)
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		tmp, churn := filepath.Join(dir, ".churn.tmp"), filepath.Join(dir, "churn.gbs")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(tmp, versions[i%2], 0o644); err != nil {
				errs <- err
				return
			}
			if err := os.Rename(tmp, churn); err != nil {
				errs <- err
				return
			}
		}
	}()
	var lookups sync.WaitGroup
	for range 4 {
		lookups.Add(1)
		go func() {
			defer lookups.Done()
			for range 100 {
				if _, err := r.Find(testIf, testAFU); err != nil {
					errs <- err
					return
				}
				if _, err := r.FindByName("stable.gbs", testIf); err != nil {
					errs <- err
					return
				}
				if b, err := r.Find(testIf2, testAFU2); err == nil && b.Name != "churn.gbs" {
					errs <- errors.New("found the churning AFU in " + b.Name)
					return
				}
				if len(r.List()) == 0 {
					errs <- errors.New("List is empty")
					return
				}
			}
		}()
	}
	lookups.Wait()
	close(stop)
	<-writerDone
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRepositoryIndexesXclbin keeps xclbin files beside Intel bitstreams
// under the same rules: indexed by header, found by (interface UUID, xclbin
// UUID), names checked against headers, links out of the repository
// refused, names relative to the repository only.
func TestRepositoryIndexesXclbin(t *testing.T) {
	outside := writeFile(t, t.TempDir(), "evil.xclbin", xclbinFile(t, testXIf, testXclbin2, 64))
	dir := t.TempDir()
	writeFile(t, dir, testIf+"/"+testAFU+".gbs", gbsFile(t, testIf, testAFU, 64))
	writeFile(t, dir, testXIf+"/"+testXclbin+".xclbin", xclbinFile(t, testXIf, testXclbin, 64))
	writeFile(t, dir, "alveo/kernels.bin", xclbinFile(t, testIf2, testXclbin, 64))             // misnamed: header wins
	writeFile(t, dir, testXIf+"/"+testXclbin2+".xclbin", xclbinFile(t, testXIf, testAFU2, 64)) // name disagrees with header
	writeFile(t, dir, "cut.xclbin", xclbinFile(t, testXIf, testAFU, 64)[:100])                 // truncated
	if err := os.Symlink(outside, filepath.Join(dir, "escape.xclbin")); err != nil {
		t.Fatal(err)
	}
	r := newTestRepository(t, dir)

	if got, want := names(r.List()), []string{testIf + "/" + testAFU + ".gbs", testXIf + "/" + testXclbin + ".xclbin", testXIf + "/" + testXclbin2 + ".xclbin", "alveo/kernels.bin"}; !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	b, err := r.Find(dashedUUID(testXIf), strings.ToUpper(testXclbin))
	if err != nil {
		t.Fatal(err)
	}
	if b.Format != FormatXclbin || b.Name != testXIf+"/"+testXclbin+".xclbin" || b.Platform != testPlatform {
		t.Errorf("Find = %+v", b)
	}
	if b, err := r.Find(testXIf, testAFU2); err != nil || b.Name != testXIf+"/"+testXclbin2+".xclbin" {
		t.Errorf("Find by header IDs = %+v, %v", b, err)
	}
	if b, err := r.Find(testIf2, testXclbin); err != nil || b.Name != "alveo/kernels.bin" {
		t.Errorf("Find misnamed = %+v, %v", b, err)
	}
	_, err = r.Find(testXIf, testXclbin2)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("the xclbin outside the repository: got %v, want ErrNotFound", err)
	}
	wantErr(t, err, "2 files were skipped")

	_, err = r.FindByName("escape.xclbin", "")
	wantErr(t, err, "resolves to "+outside, "outside the repository")
	_, err = r.FindByName("../"+filepath.Base(filepath.Dir(outside))+"/evil.xclbin", "")
	wantErr(t, err, `contains ".."`)
	_, err = r.FindByName(outside, "")
	wantErr(t, err, "is an absolute path")
	_, err = r.FindByName("alveo/kernels.bin", testXIf)
	if !errors.Is(err, ErrInterfaceMismatch) {
		t.Fatalf("got %v, want ErrInterfaceMismatch", err)
	}
	_, err = r.FindByName("cut.xclbin", "")
	if !errors.Is(err, ErrInvalidBitstream) {
		t.Fatalf("got %v, want ErrInvalidBitstream", err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestSwapAfterFindStaysInTheRepository: a bitstream found in the
// repository is read again when it is programmed; a symbolic link swapped
// in for it meanwhile, to a file outside the repository that carries the
// same IDs, is refused rather than programmed.
func TestSwapAfterFindStaysInTheRepository(t *testing.T) {
	outside := t.TempDir()
	evil := writeFile(t, outside, "evil.gbs", gbsWithPayload(t, testIf, testAFU, []byte("EVILEVILEVILEVIL")))
	dir := t.TempDir()
	writeFile(t, dir, "ok.gbs", gbsWithPayload(t, testIf, testAFU, []byte("GOODGOODGOODGOOD")))
	bs, err := newTestRepository(t, dir).Find(testIf, testAFU)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ok.gbs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(evil, filepath.Join(dir, "ok.gbs")); err != nil {
		t.Fatal(err)
	}
	payload, err := bs.ReadPayload("")
	if err == nil || !errors.Is(err, ErrBitstreamChanged) || !strings.Contains(err.Error(), "outside the repository") {
		t.Fatalf("read %q (%v) from %s, outside the repository %s; want it refused", payload, err, evil, dir)
	}
}

// TestRepositoryFindByNameSkipsHiddenEntries: an entry whose name starts
// with "." is no bitstream of the repository (the index skips it), so a
// claim cannot name it either: above all the temporary file of an install
// in progress, or one a crash left behind, whose GBS header parses while
// its payload is cut short.
func TestRepositoryFindByNameSkipsHiddenEntries(t *testing.T) {
	dir := t.TempDir()
	whole := gbsFile(t, testIf, testAFU, 4096)
	writeFile(t, dir, testIf+"/"+testAFU+".gbs", whole)
	writeFile(t, dir, testIf+"/."+testAFU+".gbs.123456.tmp", whole[:len(whole)-2048])
	writeFile(t, dir, ".staging/next.gbs", whole)
	r := newTestRepository(t, dir)
	if got, want := names(r.List()), []string{testIf + "/" + testAFU + ".gbs"}; !slices.Equal(got, want) {
		t.Fatalf("List = %q, want %q", got, want)
	}
	for _, name := range []string{testIf + "/." + testAFU + ".gbs.123456.tmp", ".staging/next.gbs", "./.staging/next.gbs"} {
		b, err := r.FindByName(name, "")
		if err == nil {
			t.Errorf("FindByName(%q) = %s (%d payload bytes), want it refused: the index skips hidden entries", name, b.Path, b.PayloadSize)
			continue
		}
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("FindByName(%q) error %q does not match ErrNotFound", name, err)
		}
	}
	if _, err := r.FindByName("./"+testIf+"/"+testAFU+".gbs", testIf); err != nil {
		t.Errorf("FindByName of the installed file: %v", err)
	}
}
