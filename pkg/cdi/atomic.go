package cdi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// specFileMode lets every user read a spec, as runtimes and tools expect.
const specFileMode os.FileMode = 0o644

// writeFileAtomic replaces path with data so that a reader sees the old
// content or the new one, never a mix, and the new content survives a crash
// once it returns nil. It writes a temporary file in the same directory,
// fsyncs it, runs check on it, renames it over path and fsyncs the
// directory. The temporary file is named ".<name>.<random>.tmp": CDI caches
// only read *.json and *.yaml files. On any error the temporary file is
// removed and path is left as it was.
func (w *Writer) writeFileAtomic(path string, data []byte, check func(tmpPath string) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	tmpPath := tmp.Name()
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmpPath)
		}
	}()

	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmpPath, err)
	}
	if err := tmp.Chmod(specFileMode); err != nil {
		return fmt.Errorf("chmod %s: %w", tmpPath, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmpPath, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpPath, err)
	}
	if err := check(tmpPath); err != nil {
		return err
	}
	if err := w.rename(tmpPath, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmpPath, path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%s is in place but not durable: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory so that a rename or create in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	err = d.Sync()
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// removeStaleTemporaryFiles removes the temporary files that writes of path
// interrupted by a crash left behind.
func removeStaleTemporaryFiles(path string) error {
	// The name holds no glob metacharacters: vendor, class and claim UID
	// are validated.
	matches, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp"))
	if err != nil {
		return fmt.Errorf("find temporary files of %s: %w", path, err)
	}
	var errs []error
	for _, m := range matches {
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
