package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func (c *Cluster) certificates(context.Context) error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if err := p.issue("apiserver", "kube-apiserver", nil, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"); err != nil {
		return err
	}
	clients := map[string][2]any{
		"admin":              {"fpga-e2e-admin", []string{"system:masters"}},
		"scheduler":          {"system:kube-scheduler", []string(nil)},
		"controller-manager": {"system:kube-controller-manager", []string(nil)},
		"kubelet":            {"system:node:" + c.NodeName, []string{"system:nodes"}},
	}
	for name, v := range clients {
		if err := p.issue(name, v[0].(string), v[1].([]string)); err != nil {
			return err
		}
	}
	return p.serviceAccountKey()
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	p, err := c.Start("etcd", c.bin("etcd"), []string{
		"--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--unsafe-no-fsync", "--log-level", "warn",
	}, nil)
	if err != nil {
		return err
	}
	c.etcdURL = client
	return c.waitHTTP(ctx, p, client+"/health", nil)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if c.Server == "" {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.Server = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	}
	port := strings.TrimPrefix(c.Server, "https://127.0.0.1:")
	pk := c.pki.path
	p, err := c.Start("kube-apiserver", c.bin("kube-apiserver"), append([]string{
		"--etcd-servers", c.etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", port,
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", pk("apiserver.crt"), "--tls-private-key-file", pk("apiserver.key"),
		"--client-ca-file", pk("ca.crt"),
		"--service-account-key-file", pk("sa.pub"), "--service-account-signing-key-file", pk("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		"--cert-dir", filepath.Join(c.Dir, "apiserver-certs"),
	}, c.apiServerExtra...), nil)
	if err != nil {
		return err
	}
	c.apiServer = p
	if c.AdminKubeconfig, err = c.pki.kubeconfig("admin", c.Server); err != nil {
		return err
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return err
	}
	if err := c.waitHTTP(ctx, p, c.Server+"/readyz", tlsCfg); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	c.Client, err = kubernetes.NewForConfig(rc)
	return err
}

// tlsConfig authenticates as admin against the API server.
func (c *Cluster) tlsConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(c.pki.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

func (c *Cluster) startControllers(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	sched, err := c.pki.kubeconfig("scheduler", c.Server)
	if err != nil {
		return err
	}
	cm, err := c.pki.kubeconfig("controller-manager", c.Server)
	if err != nil {
		return err
	}
	if _, err := c.Start("kube-scheduler", c.bin("kube-scheduler"), []string{
		"--kubeconfig", sched, "--authentication-kubeconfig", sched, "--authorization-kubeconfig", sched,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[0]),
	}, nil); err != nil {
		return err
	}
	if _, err := c.Start("kube-controller-manager", c.bin("kube-controller-manager"), []string{
		"--kubeconfig", cm, "--authentication-kubeconfig", cm, "--authorization-kubeconfig", cm,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(ports[1]),
		"--service-account-private-key-file", c.pki.path("sa.key"), "--root-ca-file", c.pki.path("ca.crt"),
		"--use-service-account-credentials=true",
	}, nil); err != nil {
		return err
	}
	return nil
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// address with the flags of the first start and extra (e.g.
// "--feature-gates=DRADeviceBindingConditions=false"; none restores the
// first start's), and waits until it is ready. The other components
// reconnect on their own.
func (c *Cluster) RestartAPIServer(ctx context.Context, extra ...string) error {
	c.apiServer.Stop(20 * time.Second)
	c.apiServerExtra = extra
	return c.startAPIServer(ctx)
}
