package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestInstallHook(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "opt", "bin")
	out, err := execute(t, newRootCommand(), "install-hook", "--dir", dir)
	if err != nil {
		t.Fatalf("install-hook: %v\n%s", err, out)
	}
	installed := filepath.Join(dir, hookBinaryName)
	if !strings.Contains(out, "installed "+installed) {
		t.Fatalf("output %q does not name %s", out, installed)
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(installed)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed file differs from this program (%v)", err)
	}
	if fi, _ := os.Stat(installed); fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed with mode %v, want 0755", fi.Mode().Perm())
	}
	// Again: nothing to do.
	if out, err := execute(t, newRootCommand(), "install-hook", "--dir", dir); err != nil || !strings.Contains(out, "up to date") {
		t.Fatalf("second install-hook: %v, %q", err, out)
	}
	// An older program is replaced, not written into.
	if err := os.WriteFile(installed, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(installed)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if out, err := execute(t, newRootCommand(), "install-hook", "--dir", dir); err != nil || !strings.Contains(out, "installed") {
		t.Fatalf("install over an old hook: %v, %q", err, out)
	}
	var b [3]byte
	if n, _ := old.ReadAt(b[:], 0); string(b[:n]) != "old" {
		t.Fatalf("the old hook's open file changed to %q: it was written in place", b[:n])
	}
	if _, err := execute(t, newRootCommand(), "install-hook"); err == nil || !strings.Contains(err.Error(), "dir") {
		t.Fatalf("install-hook without --dir: %v", err)
	}
}

// TestInstallHookRepairsMode: the runtime runs the hook as root on the
// host. An installed copy with the right bytes but the wrong mode (not
// executable: every region-mode container fails to start; writable by
// anyone: any host user can replace what root runs) must be replaced, not
// called up to date.
func TestInstallHookRepairsMode(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o777} {
		dir := filepath.Join(t.TempDir(), "bin")
		installed := filepath.Join(dir, hookBinaryName)
		if _, _, err := installHook(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(installed, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := execute(t, newRootCommand(), "install-hook", "--dir", dir); err != nil {
			t.Fatalf("install-hook over a %v copy: %v", mode, err)
		}
		fi, err := os.Stat(installed)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("an installed copy with mode %v is left with mode %v, want 0755", mode, fi.Mode().Perm())
		}
	}
}

// TestInstallHookRepairsSpecialBitsAndOwner: a copy with the right bytes
// and permission bits 0755 is still not up to date when it is set-user-ID
// or set-group-ID (any host user runs the driver with root's rights), or
// when another user owns it (that user may replace what root runs): it
// must be replaced by a plain 0755 copy of this process's user.
func TestInstallHookRepairsSpecialBitsAndOwner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(path string) error
	}{
		{"setuid", func(p string) error { return os.Chmod(p, 0o755|os.ModeSetuid) }},
		{"setgid", func(p string) error { return os.Chmod(p, 0o755|os.ModeSetgid) }},
		{"owned by another user", func(p string) error {
			if os.Geteuid() != 0 {
				t.Skip("changing a file's owner needs root")
			}
			return os.Chown(p, 65534, 65534)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "bin")
			installed := filepath.Join(dir, hookBinaryName)
			if _, _, err := installHook(dir); err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(installed); err != nil {
				t.Fatal(err)
			}
			if _, wrote, err := installHook(dir); err != nil || !wrote {
				t.Fatalf("install-hook over a tampered copy: wrote %v, %v; want it replaced", wrote, err)
			}
			fi, err := os.Stat(installed)
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode() != 0o755 || int(st.Uid) != os.Geteuid() {
				t.Errorf("installed copy has mode %v and owner %d, want -rwxr-xr-x and %d", fi.Mode(), st.Uid, os.Geteuid())
			}
		})
	}
}
