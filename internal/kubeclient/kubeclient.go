// Package kubeclient builds the Kubernetes client configuration of both
// binaries from their --kubeconfig, --kube-api-qps and --kube-api-burst
// flags.
package kubeclient

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Flags locate the API server and bound the client's request rate.
type Flags struct {
	// Kubeconfig is the kubeconfig file; the in-cluster config when empty.
	Kubeconfig string
	// QPS and Burst are the client-side rate limit.
	QPS   float32
	Burst int
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst on
// fs, with qps and burst as the rate limit's defaults.
func (f *Flags) AddFlags(fs *pflag.FlagSet, qps float32, burst int) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster config when empty")
	fs.Float32Var(&f.QPS, "kube-api-qps", qps, "API server queries per second")
	fs.IntVar(&f.Burst, "kube-api-burst", burst, "API server burst")
}

// Config is the REST configuration the flags name, identifying itself as
// userAgent.
func (f Flags) Config(userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if f.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config (set --kubeconfig outside a cluster): %w", err)
	}
	cfg.QPS, cfg.Burst = f.QPS, f.Burst
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Clientset is the typed client of Config(userAgent).
func (f Flags) Clientset(userAgent string) (kubernetes.Interface, error) {
	cfg, err := f.Config(userAgent)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}
