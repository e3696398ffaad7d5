package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestConfig: the flags' kubeconfig, rate limit and the user agent make
// the REST config.
func TestConfig(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var f Flags
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	f.AddFlags(fs, 5, 10)
	if err := fs.Parse([]string{"--kubeconfig", kubeconfig, "--kube-api-qps", "7"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.Config("agent")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.QPS != 7 || cfg.Burst != 10 || cfg.UserAgent != "agent" {
		t.Errorf("config host %q qps %v burst %d agent %q, want https://127.0.0.1:6443, 7, 10, agent", cfg.Host, cfg.QPS, cfg.Burst, cfg.UserAgent)
	}
	if _, err := f.Clientset("agent"); err != nil {
		t.Errorf("Clientset: %v", err)
	}
}

// TestConfigOutsideACluster: without --kubeconfig outside a cluster, the
// error says to set it.
func TestConfigOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := (Flags{}).Config("agent"); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("error %v, want one naming --kubeconfig", err)
	}
}
