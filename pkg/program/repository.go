package program

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
)

// DefaultRepositoryDir is where a node keeps its bitstreams unless configured
// otherwise.
const DefaultRepositoryDir = "/srv/fpga/bitstreams"

// DefaultRescanInterval is how often, at most, a lookup miss re-indexes a
// repository whose directories did not change.
const DefaultRescanInterval = time.Second

// racyWindow: a directory whose mtime is this close to the start of a scan
// may change again without its mtime changing (file systems stamp times from
// a coarse clock), so it counts as changed until a later scan sees it older.
const racyWindow = time.Second

// Repository indexes the bitstreams below a directory by the IDs in their
// headers, whatever the files are called: GBS and AOCX files by interface
// and AFU ID, xclbin files by interface UUID and xclbin UUID. The layout
// <interfaceID>/<afuID>.gbs (or .aocx, or <interfaceUUID>/<xclbinUUID>.xclbin)
// is covered by that: names are only checked against headers, and a
// mismatch is logged. Files that are not
// valid bitstreams, symlinks that leave the directory and entries whose name
// starts with "." are skipped with a logged reason; one bad file never fails
// the index.
//
// Lookups re-validate a hit with a stat and re-index on a miss, at most once
// per rescan interval unless a directory changed. A Repository is safe for
// concurrent use; the Bitstreams it returns are shared and read-only.
type Repository struct {
	dir            string
	logger         klog.Logger
	openOpts       []OpenOption
	rescanInterval time.Duration
	now            func() time.Time

	// scanMu serialises scans, so that a storm of misses scans once.
	scanMu sync.Mutex

	mu sync.RWMutex
	// index is replaced, never modified, once published.
	index *repoIndex
}

// RepositoryOption configures a Repository.
type RepositoryOption func(*Repository)

// WithOpenOptions sets the options (size limits) used to open every
// bitstream in the repository.
func WithOpenOptions(opts ...OpenOption) RepositoryOption {
	return func(r *Repository) { r.openOpts = append(r.openOpts, opts...) }
}

// WithRescanInterval sets how often, at most, a lookup miss re-indexes a
// repository whose directories did not change (DefaultRescanInterval).
func WithRescanInterval(d time.Duration) RepositoryOption {
	return func(r *Repository) { r.rescanInterval = d }
}

// NewRepository indexes the bitstreams below dir. A missing dir is not an
// error: the repository is empty until the directory appears, and lookups
// say that it is missing. dir must not be a file. The logger comes from ctx.
func NewRepository(ctx context.Context, dir string, opts ...RepositoryOption) (*Repository, error) {
	if dir == "" {
		return nil, fmt.Errorf("bitstream repository directory is empty: give a directory such as %s", DefaultRepositoryDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bitstream repository %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("bitstream repository %s is not a directory: point it at the directory that holds the bitstreams", abs)
	}
	r := &Repository{
		dir:            abs,
		logger:         klog.FromContext(ctx).WithValues("repository", abs),
		rescanInterval: DefaultRescanInterval,
		now:            time.Now,
	}
	for _, o := range opts {
		o(r)
	}
	r.scanMu.Lock()
	r.scan()
	r.scanMu.Unlock()
	return r, nil
}

// Dir returns the repository's directory (absolute).
func (r *Repository) Dir() string { return r.dir }

// repoIndex is one scan's result.
type repoIndex struct {
	// root is dir with symlinks resolved; empty when rootErr is set.
	root    string
	rootErr error
	// files holds every file considered, by name relative to the root,
	// with its Bitstream or the reason it was refused.
	files map[string]*fileEntry
	// byID holds the usable files per ID pair, the preferred one first.
	byID map[idKey][]*fileEntry
	// dirs holds every directory walked with its mtime.
	dirs map[string]time.Time
	// racy is set when a directory changed too close to the scan for its
	// mtime to be trusted.
	racy      bool
	scannedAt time.Time
	// generation counts scans.
	generation uint64
	refused    int
}

type idKey struct{ interfaceID, afuID string }

type fileEntry struct {
	fp  fingerprint
	bs  *Bitstream // nil when refused
	err error      // why the file was refused
}

// fingerprint identifies a version of a file cheaply: a stat that still
// matches means the file need not be parsed again.
type fingerprint struct {
	path     string // the file opened (symlinks resolved)
	size     int64
	mtime    int64
	dev, ino uint64
}

func fingerprintOf(path string, fi os.FileInfo) fingerprint {
	fp := fingerprint{path: path, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fp.dev, fp.ino = uint64(st.Dev), st.Ino //nolint:unconvert // Dev is int32 or uint64 by platform
	}
	return fp
}

func (r *Repository) snapshot() *repoIndex {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.index
}

// Find returns the preferred bitstream for the interface and AFU IDs (any
// case, dashed or not; for an xclbin, its interface UUID and xclbin UUID): a
// GBS before an AOCX or xclbin, then the newest. The error matches
// ErrNotFound and says what the repository holds for that AFU.
func (r *Repository) Find(interfaceID, afuID string) (*Bitstream, error) {
	return r.FindFor([]string{interfaceID}, afuID)
}

// FindFor is Find for a region that accepts several interfaces (an Alveo
// shell lists them all, see discovery.Card.Interfaces): the preferred
// bitstream for the first of interfaceIDs, in their order, that the
// repository holds one for.
func (r *Repository) FindFor(interfaceIDs []string, afuID string) (*Bitstream, error) {
	if len(interfaceIDs) == 0 {
		return nil, fmt.Errorf("%w: no bitstream for AFU %s: the region has no usable interface ID", ErrNotFound, afuID)
	}
	afu, err := discovery.CanonicalID(afuID)
	if err != nil {
		return nil, fmt.Errorf("AFU ID: %w", err)
	}
	keys := make([]idKey, len(interfaceIDs))
	for i, id := range interfaceIDs {
		ifID, err := discovery.CanonicalID(id)
		if err != nil {
			return nil, fmt.Errorf("interface ID: %w", err)
		}
		keys[i] = idKey{interfaceID: ifID, afuID: afu}
	}
	idx := r.snapshot()
	e := idx.preferred(keys)
	if e != nil && unchanged(e) {
		return e.bs, nil
	}
	// A hit that went stale re-indexes now; a miss at most once per
	// rescan interval.
	r.refresh(idx.generation, e != nil)
	idx = r.snapshot()
	if e := idx.preferred(keys); e != nil {
		return e.bs, nil
	}
	return nil, r.notFound(idx, keys)
}

// FindByName returns the bitstream in the file name, a path relative to the
// repository. It refuses absolute names, names with "..", names that leave
// the repository once symlinks are resolved and non-regular files. When
// interfaceID is not empty the bitstream must be built for it (else the
// error matches ErrInterfaceMismatch).
func (r *Repository) FindByName(name, interfaceID string) (*Bitstream, error) {
	clean, err := r.cleanName(name)
	if err != nil {
		return nil, err
	}
	var wantIf string
	if interfaceID != "" {
		if wantIf, err = discovery.CanonicalID(interfaceID); err != nil {
			return nil, fmt.Errorf("interface ID: %w", err)
		}
	}
	idx := r.snapshot()
	e := idx.files[clean]
	if e == nil {
		r.refresh(idx.generation, false)
		idx = r.snapshot()
		e = idx.files[clean]
	}
	var bs *Bitstream
	if e != nil && e.bs != nil && unchanged(e) {
		bs = e.bs
	} else if bs, err = r.openName(idx, clean); err != nil {
		return nil, err
	}
	if wantIf != "" && bs.InterfaceID != wantIf {
		return nil, fmt.Errorf("%w: bitstream %s is built for interface %s, not %s: use a bitstream built for that interface (FIM)", ErrInterfaceMismatch, bs.Path, bs.InterfaceID, wantIf)
	}
	return bs, nil
}

// List returns every usable bitstream, ordered by name.
func (r *Repository) List() []*Bitstream {
	idx := r.snapshot()
	var out []*Bitstream
	for _, e := range idx.files {
		if e.bs != nil {
			out = append(out, e.bs)
		}
	}
	slices.SortFunc(out, func(a, b *Bitstream) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (r *Repository) cleanName(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("bitstream name is empty: give a file name relative to the repository %s", r.dir)
	case filepath.IsAbs(name):
		return "", fmt.Errorf("bitstream name %q is an absolute path: give a path relative to the repository %s", name, r.dir)
	case slices.Contains(strings.Split(filepath.ToSlash(name), "/"), ".."):
		return "", fmt.Errorf("bitstream name %q contains \"..\": give a path inside the repository %s", name, r.dir)
	}
	clean := filepath.Clean(name)
	if clean == "." {
		return "", fmt.Errorf("bitstream name %q names the repository %s itself: give a file name", name, r.dir)
	}
	// The index skips entries whose name starts with "." (temporary files
	// of an install in progress among them): a name may not reach them.
	for part := range strings.SplitSeq(clean, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") {
			return "", fmt.Errorf("%w: bitstream name %q has an element starting with \".\" (%q), which the repository %s skips (hidden or temporary files): name a bitstream file",
				ErrNotFound, name, part, r.dir)
		}
	}
	return clean, nil
}

// openName opens the file name (clean, relative) afresh.
func (r *Repository) openName(idx *repoIndex, name string) (*Bitstream, error) {
	root, err := filepath.EvalSymlinks(r.dir)
	if err != nil {
		return nil, fmt.Errorf("%w: bitstream %q: repository %s cannot be read: %w", ErrNotFound, name, r.dir, err)
	}
	path := filepath.Join(r.dir, name)
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, lerr := os.Lstat(path); lerr == nil {
			return nil, fmt.Errorf("%w: bitstream %q in %s is a symlink whose target does not exist", ErrNotFound, name, r.dir)
		}
		return nil, fmt.Errorf("%w: no file %q in the bitstream repository %s (it holds %d bitstreams)", ErrNotFound, name, r.dir, idx.usable())
	}
	if err != nil {
		return nil, fmt.Errorf("bitstream %q in %s: %w", name, r.dir, err)
	}
	if !within(root, real) {
		return nil, fmt.Errorf("bitstream %q in %s resolves to %s, outside the repository: refused; copy the file into the repository", name, r.dir, real)
	}
	if real != filepath.Join(root, name) {
		path = real // a symlink: open what was checked
	}
	bs, err := Open(path, r.openOpts...)
	if err != nil {
		return nil, err
	}
	bs.Name, bs.repoDir = name, r.dir
	return bs, nil
}

// within reports whether the resolved path p lies below the resolved root.
func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// unchanged reports whether e's file still stats as it did when indexed.
func unchanged(e *fileEntry) bool {
	fi, err := os.Stat(e.fp.path)
	return err == nil && fingerprintOf(e.fp.path, fi) == e.fp
}

// preferred is the preferred entry of the first of keys the index holds
// one for, or nil.
func (idx *repoIndex) preferred(keys []idKey) *fileEntry {
	for _, key := range keys {
		if es := idx.byID[key]; len(es) > 0 {
			return es[0]
		}
	}
	return nil
}

func (idx *repoIndex) usable() int {
	return len(idx.files) - idx.refused
}

// notFound says that the index holds no bitstream for keys (one AFU, the
// region's interfaces) and what it holds for that AFU.
func (r *Repository) notFound(idx *repoIndex, keys []idKey) error {
	afu := keys[0].afuID
	var want []string
	for _, k := range keys {
		want = append(want, k.interfaceID)
	}
	what := fmt.Sprintf("no bitstream for AFU %s with interface %s in %s", afu, strings.Join(want, " or "), r.dir)
	if idx.rootErr != nil {
		return fmt.Errorf("%w: %s: the repository cannot be read: %w: create it and copy the bitstreams into it", ErrNotFound, what, idx.rootErr)
	}
	var ifs []string
	for k := range idx.byID {
		if k.afuID == afu {
			ifs = append(ifs, k.interfaceID)
		}
	}
	slices.Sort(ifs)
	if len(ifs) > 0 {
		what += fmt.Sprintf(": found it only for interfaces %v: use a card with a matching interface (FIM) or build the AFU for interface %s", ifs, want[0])
	} else {
		what += fmt.Sprintf(": the repository holds %d bitstreams, none for that AFU: copy one into it", idx.usable())
	}
	if idx.refused > 0 {
		what += fmt.Sprintf(" (%d files were skipped as unusable: see the driver log)", idx.refused)
	}
	return fmt.Errorf("%w: %s", ErrNotFound, what)
}
