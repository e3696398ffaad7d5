// Package atomicfile replaces files so that a reader sees the old content
// or the new one, never a mix, and the new content survives a crash once
// Write returns: a temporary file in the same directory, fsync, rename,
// fsync of the directory.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Options tune Write. The zero value writes with mode 0600.
type Options struct {
	Perm os.FileMode
	// Check runs on the complete temporary file before it replaces the
	// target; an error keeps the old file.
	Check func(tmpPath string) error
	// Rename replaces os.Rename; tests use it to make a write fail late.
	Rename func(oldpath, newpath string) error
	// NoSync replaces the file atomically without flushing it or the
	// directory: after a crash of the kernel the file may hold the old
	// content or the new one, be empty or be missing, never a mix (a
	// crash of the process alone loses nothing). For files rebuilt from
	// elsewhere after a restart.
	NoSync bool
}

// Write replaces path with data. The temporary file is named
// ".<name>.<random>.tmp", which directory scanners that read only known
// extensions (CDI: *.json, *.yaml) ignore. On any error the temporary file
// is removed and path is left as it was.
func Write(path string, data []byte, o Options) (err error) {
	if o.Perm == 0 {
		o.Perm = 0o600
	}
	if o.Rename == nil {
		o.Rename = os.Rename
	}
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
	if err := tmp.Chmod(o.Perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmpPath, err)
	}
	if !o.NoSync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("fsync %s: %w", tmpPath, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmpPath, err)
	}
	if o.Check != nil {
		if err := o.Check(tmpPath); err != nil {
			return err
		}
	}
	if err := o.Rename(tmpPath, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmpPath, path, err)
	}
	if o.NoSync {
		return nil
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("%s is in place but not durable: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs a directory so that a rename, create or remove in it is
// durable.
func SyncDir(dir string) error {
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

// RemoveStale removes the temporary files that writes of path interrupted
// by a crash left behind. path must hold no glob metacharacters.
func RemoveStale(path string) error {
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
