package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RegistryAccess is how the node's driver reaches OCI registries for
// bitstreamRef: node-level settings, as an administrator gives them.
type RegistryAccess struct {
	// Insecure lists registries (host:port) reached over plain HTTP.
	Insecure []string
	// Credentials is a docker config.json ("auths"); empty: anonymous.
	// From the chart it reaches the daemon as the Secret
	// RegistryCredentialsSecret of ChartNamespace, through the chart's
	// kubeletPlugin.registry.credentials values.
	Credentials []byte
	// CA is a PEM bundle of CA certificates trusted for registries' HTTPS
	// besides the system's; from the chart, the Secret RegistryCASecret
	// (kubeletPlugin.registry.ca).
	CA []byte
}

// The Secrets of ChartNamespace holding RegistryAccess.Credentials and
// RegistryAccess.CA when the driver runs from the chart.
const (
	RegistryCredentialsSecret = "fpga-registry-credentials"
	RegistryCASecret          = "fpga-registry-ca"
)

// UseRegistry makes the driver reach registries as a says from its next
// start (Start, Reconfigure).
func (n *FPGANode) UseRegistry(a RegistryAccess) { n.registry = a }

// Reconfigure gives the running driver what UseRegistry set: an upgrade of
// the chart release (new values; the DaemonSet replaces its pod), or a
// restart of the host process with new flags. It returns once the new
// daemon registered with the kubelet and published.
func (n *FPGANode) Reconfigure(ctx context.Context) error {
	if n.chart == nil {
		n.Stop()
		return n.Start(ctx)
	}
	return n.chart.upgrade(ctx, n)
}

// registryArgs are the host process's flags for the registry access (the
// credentials written to a file of the node's directory).
func (n *FPGANode) registryArgs() ([]string, error) {
	var args []string
	if len(n.registry.Insecure) > 0 {
		args = append(args, "--insecure-registries", strings.Join(n.registry.Insecure, ","))
	}
	for _, f := range []struct {
		flag, file string
		data       []byte
	}{
		{"--registry-config", "registry-config.json", n.registry.Credentials},
		{"--registry-ca-file", "registry-ca.crt", n.registry.CA},
	} {
		if len(f.data) == 0 {
			continue
		}
		path := filepath.Join(n.Dir, f.file)
		if err := os.WriteFile(path, f.data, 0o600); err != nil {
			return nil, err
		}
		args = append(args, f.flag, path)
	}
	return args, nil
}

// registryValues are the chart values (a values file) for the registry
// access and the node's bitstream cache.
func (n *FPGANode) registryValues() (string, error) {
	insecure, err := json.Marshal(append([]string{}, n.registry.Insecure...))
	if err != nil {
		return "", err
	}
	secret, caSecret := "", ""
	if len(n.registry.Credentials) > 0 {
		secret = RegistryCredentialsSecret
	}
	if len(n.registry.CA) > 0 {
		caSecret = RegistryCASecret
	}
	return fmt.Sprintf(`kubeletPlugin:
  bitstreamCache:
    hostDir: %s
  registry:
    insecureRegistries: %s
    credentials:
      secretName: %q
      key: config.json
    ca:
      secretName: %q
      key: ca.crt
`, n.CacheDir, insecure, secret, caSecret), nil
}

// applyRegistrySecrets creates or updates the Secrets the chart values of
// a name, and deletes those a leaves empty.
func (c *Cluster) applyRegistrySecrets(ctx context.Context, a RegistryAccess) error {
	secrets := c.Client.CoreV1().Secrets(ChartNamespace)
	for _, s := range []struct {
		name, key string
		data      []byte
	}{
		{RegistryCredentialsSecret, "config.json", a.Credentials},
		{RegistryCASecret, "ca.crt", a.CA},
	} {
		if len(s.data) == 0 {
			if err := secrets.Delete(ctx, s.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		obj := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: ChartNamespace},
			Data:       map[string][]byte{s.key: s.data},
		}
		_, err := secrets.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = secrets.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// StartRegistry runs the CNCF Distribution registry binary bin (built by
// hack/e2e/build-registry.sh) as a component of the cluster: plain HTTP on
// a free port of 127.0.0.1, anonymous, storage below the run directory,
// stopped with the cluster. It returns the registry's host:port once it
// accepts connections.
func (c *Cluster) StartRegistry(ctx context.Context, bin string) (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	host := fmt.Sprintf("127.0.0.1:%d", ports[0])
	dir := filepath.Join(c.Dir, "registry")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "data"), host)), 0o600); err != nil {
		return "", err
	}
	p, err := c.Start("registry", bin, []string{"serve", config}, nil)
	if err != nil {
		return "", err
	}
	return host, c.waitFor(ctx, p, 30*time.Second, func() error {
		conn, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}
