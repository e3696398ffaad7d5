// Package registrytest runs a real CNCF Distribution registry
// (github.com/distribution/distribution/v3, built by
// hack/e2e/build-registry.sh) on 127.0.0.1 for tests: plain HTTP, HTTPS with
// a test CA, or htpasswd (bcrypt) authentication.
package registrytest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/fpga-dra/fpga-dra-driver/internal/webhook"
)

// BinaryEnv names the CNCF Distribution registry binary the tests run;
// `make test` sets it from hack/e2e/build-registry.sh.
const BinaryEnv = "FPGA_DRA_REGISTRY_BIN"

// Binary returns the registry binary: $FPGA_DRA_REGISTRY_BIN, else
// the one hack/e2e/build-registry.sh cached. Without one the test is
// skipped, except in CI (CI=true), where it fails: the registry tests must
// run there.
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(BinaryEnv); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("%s=%s: %v: run hack/e2e/build-registry.sh and set %s to the path it prints", BinaryEnv, bin, err, BinaryEnv)
		}
		return bin
	}
	cache := os.Getenv("FPGA_DRA_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "fpga-dra-driver")
	}
	found, _ := filepath.Glob(filepath.Join(cache, "bin", "distribution-*", "registry"))
	if len(found) > 0 {
		sort.Strings(found)
		return found[len(found)-1]
	}
	msg := fmt.Sprintf("no CNCF Distribution registry binary: run hack/e2e/build-registry.sh (make test does) or set %s", BinaryEnv)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Config chooses how a registry is served.
type Config struct {
	// TLS serves HTTPS with a certificate for localhost from a test CA
	// (Registry.CAFile).
	TLS bool
	// User and Password, when set, require HTTP basic auth (htpasswd with
	// a bcrypt hash).
	User, Password string
}

// Registry is a real registry process on 127.0.0.1.
type Registry struct {
	// Host is the registry part of references: 127.0.0.1:PORT, or
	// localhost:PORT with TLS (the name its certificate is for).
	Host string
	// CAFile is the test CA's certificate (PEM) when Config.TLS is set.
	CAFile string
	Config Config

	dir string
	bin string
	t   testing.TB

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}

	logMu sync.Mutex
	log   bytes.Buffer
}

// Start starts a registry with empty storage, stopped when the test ends.
func Start(t testing.TB, cfg Config) *Registry {
	t.Helper()
	r := &Registry{dir: t.TempDir(), Config: cfg, bin: Binary(t), t: t}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r.Host = addr
	if cfg.TLS {
		r.Host = "localhost:" + strings.TrimPrefix(addr, "127.0.0.1:")
	}
	var extra strings.Builder
	if cfg.TLS {
		r.CAFile = writeCertificates(t, r.dir)
		fmt.Fprintf(&extra, "  tls:\n    certificate: %s\n    key: %s\n", filepath.Join(r.dir, "server.crt"), filepath.Join(r.dir, "server.key"))
	}
	if cfg.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(cfg.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(r.dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(cfg.User+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&extra, "auth:\n  htpasswd:\n    realm: fpga-test\n    path: %s\n", htpasswd)
	}
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
%s`, filepath.Join(r.dir, "data"), addr, extra.String())
	if err := os.WriteFile(filepath.Join(r.dir, "config.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Restart()
	t.Cleanup(r.Stop)
	return r
}

// Restart runs the registry again after Stop, on the same port with the
// same content, and returns once it listens. Start calls it first.
func (r *Registry) Restart() {
	r.t.Helper()
	cmd := exec.Command(r.bin, "serve", filepath.Join(r.dir, "config.yml"))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start registry %s: %v", r.bin, err)
	}
	listening := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			r.logMu.Lock()
			r.log.WriteString(sc.Text() + "\n")
			r.logMu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "listening on") {
				listening <- true
				signalled = true
			}
		}
		if !signalled {
			listening <- false
		}
	}()
	if !<-listening {
		<-done
		_ = cmd.Wait()
		r.t.Fatalf("registry exited before listening; its log:\n%s", r.Log())
	}
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
}

// Log returns what the registry logged.
func (r *Registry) Log() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.log.String()
}

// Stop kills the registry and waits for it to exit: clients then find
// nothing listening.
func (r *Registry) Stop() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	_ = cmd.Wait()
}

// CredentialsFile writes a docker config.json holding Config.User and
// password for the registry and returns its path.
func (r *Registry) CredentialsFile(t testing.TB, password string) string {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(r.Config.User + ":" + password))
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{"auths":{"`+r.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeCertificates writes a test CA (ca.crt) and a serving certificate
// for localhost it signed (server.crt, server.key) into dir and returns the
// CA's path.
func writeCertificates(t testing.TB, dir string) string {
	t.Helper()
	certs, err := webhook.GenerateCertificates([]string{"localhost"}, time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"ca.crt": certs.CACert, "server.crt": certs.Cert, "server.key": certs.Key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "ca.crt")
}
