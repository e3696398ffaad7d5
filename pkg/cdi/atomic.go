package cdi

import (
	"os"

	"github.com/fpga-dra/fpga-dra-driver/pkg/atomicfile"
)

// specFileMode lets every user read a spec, as runtimes and tools expect.
const specFileMode os.FileMode = 0o644

// writeFileAtomic replaces path with data through atomicfile, with check
// run on the temporary file before it replaces path. A reader sees the old
// spec or the new one; neither is flushed to the disk (the driver rebuilds
// specs from its checkpoint after a crash, and /var/run/cdi is usually a
// tmpfs).
func (w *Writer) writeFileAtomic(path string, data []byte, check func(tmpPath string) error) error {
	return atomicfile.Write(path, data, atomicfile.Options{Perm: specFileMode, Check: check, Rename: w.rename, NoSync: true})
}
