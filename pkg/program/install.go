package program

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// ErrExists: Install would overwrite a different file.
var ErrExists = errors.New("bitstream already installed")

// Install copies the bitstream file src into the repository directory dir
// under its IDs, in the layout every node reads:
// <dir>/<interfaceID>/<afuID>.<gbs|aocx|xclbin> (for an xclbin, its
// interface UUID and xclbin UUID). The file is parsed first (a file
// that is not a valid bitstream is refused) and written atomically. An
// existing file with other content is refused unless force is set; the same
// content is not rewritten. It returns the installed bitstream.
func Install(dir, src string, force bool, opts ...OpenOption) (*Bitstream, error) {
	bs, err := Open(src, append(opts, WithDigest())...)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src, err)
	}
	// What is written is what was parsed: a file replaced or still being
	// written between the two reads is not installed under the IDs of
	// another content.
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != bs.SHA256 {
		return nil, fmt.Errorf("%s changed while it was read (sha256 %s, then %x): install it once it is complete", src, bs.SHA256, sum)
	}
	dest := filepath.Join(dir, bs.InterfaceID, bs.AFUID+"."+string(bs.Format))
	// Nodes load a GBS before an AOCX of the same IDs (see preferEntry): an
	// AOCX installed next to one would never be loaded. It replaces the GBS
	// with force only.
	// The repository indexes files by their headers, whatever they are
	// called: a GBS of those IDs under any name shadows the AOCX.
	var shadow []string
	if bs.Format == FormatAOCX {
		// Quietly: the files it skips are no concern of this install.
		r, err := NewRepository(klog.NewContext(context.Background(), klog.Background().V(10)), dir, WithOpenOptions(opts...))
		if err != nil {
			return nil, err
		}
		for _, other := range r.List() {
			if other.Format == FormatGBS && other.InterfaceID == bs.InterfaceID && other.AFUID == bs.AFUID {
				shadow = append(shadow, other.Path)
			}
		}
		if len(shadow) > 0 && !force {
			return nil, fmt.Errorf("%w: %s holds a GBS build of AFU %s for interface %s, which nodes load before any AOCX of those IDs, so %s would never be loaded: pass --force to replace the GBS with it", ErrExists, shadow[0], bs.AFUID, bs.InterfaceID, src)
		}
	}
	if old, err := Open(dest, append(opts, WithDigest())...); err == nil && len(shadow) == 0 {
		if old.SHA256 == bs.SHA256 {
			old.Name, _ = filepath.Rel(dir, dest)
			return old, nil
		}
		if !force {
			return nil, fmt.Errorf("%w: %s holds another build of AFU %s for interface %s (sha256 %s, new %s): pass --force to replace it", ErrExists, dest, bs.AFUID, bs.InterfaceID, old.SHA256, bs.SHA256)
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !force {
		return nil, fmt.Errorf("%w: %s exists but is not a valid bitstream (%v): pass --force to replace it", ErrExists, dest, err)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return nil, fmt.Errorf("install %s: %w", src, err)
	}
	if err := atomicfile.Write(dest, data, atomicfile.Options{Perm: 0o644}); err != nil {
		return nil, fmt.Errorf("install %s: %w", src, err)
	}
	for _, gbs := range shadow {
		if err := os.Remove(gbs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("installed %s, but the GBS %s that nodes load instead could not be removed: %w: remove it", dest, gbs, err)
		}
	}
	installed, err := Open(dest, append(opts, WithDigest())...)
	if err != nil {
		return nil, fmt.Errorf("installed %s does not read back: %w", dest, err)
	}
	installed.Name, _ = filepath.Rel(dir, dest)
	return installed, nil
}
