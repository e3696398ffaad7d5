package program

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
	dest := filepath.Join(dir, bs.InterfaceID, bs.AFUID+"."+string(bs.Format))
	if old, err := Open(dest, append(opts, WithDigest())...); err == nil {
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
	installed, err := Open(dest, append(opts, WithDigest())...)
	if err != nil {
		return nil, fmt.Errorf("installed %s does not read back: %w", dest, err)
	}
	installed.Name, _ = filepath.Rel(dir, dest)
	return installed, nil
}
