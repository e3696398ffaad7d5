package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"  // client-go and leader election metrics
	_ "k8s.io/component-base/metrics/prometheus/workqueue" // workqueue metrics
	"k8s.io/klog/v2"

	"github.com/fpga-dra/fpga-dra-driver/internal/controller"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
	"github.com/fpga-dra/fpga-dra-driver/internal/webhook"
)

// run is the controller: the metrics and probe server and the admission
// webhook on every replica, the DeviceClass reconciler and the claim
// router on the leader, until ctx ends or one of them fails.
func run(ctx context.Context, o options) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	logger := klog.FromContext(ctx)
	logger.Info("Starting fpga-dra-controller", "version", version.Version(), "commit", version.GitCommit())
	if err := o.validate(); err != nil {
		return err
	}
	cfg, err := o.kube.Config("fpga-dra-controller")
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}

	controllerMetrics, webhookMetrics := controller.NewMetrics(), webhook.NewMetrics()
	controllerMetrics.Register(legacyregistry.MustRegister)
	webhookMetrics.Register(legacyregistry.MustRegister)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := &tasks{cancel: cancel}
	healthz := leaderelection.NewLeaderHealthzAdaptor(o.healthSlack)
	if err := startServers(ctx, t, o, kube, healthz, webhookMetrics); err != nil {
		t.stop()
		return err
	}
	reconcile, err := newReconcile(ctx, t, o, kube, dyn, controllerMetrics)
	if err != nil {
		t.stop()
		return err
	}
	if o.leaderElect {
		t.run(func() error {
			return controller.RunLeaderElected(ctx, controller.LeaderElection{
				Client: kube, Namespace: o.namespace, Name: o.leaseName, Identity: o.identity,
				LeaseDuration: o.leaseDuration, RenewDeadline: o.renewDeadline, RetryPeriod: o.retryPeriod,
				Healthz: healthz,
			}, reconcile)
		})
	} else {
		t.wg.Go(func() { reconcile(ctx) })
	}

	<-ctx.Done()
	t.wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	logger.Info("Stopped")
	return nil
}

// tasks are the goroutines of the controller; the first that fails stops
// them all.
type tasks struct {
	wg     sync.WaitGroup
	cancel context.CancelCauseFunc
}

// fail stops every task with err, when there is one.
func (t *tasks) fail(err error) {
	if err != nil {
		t.cancel(err)
	}
}

// run runs f as a task.
func (t *tasks) run(f func() error) { t.wg.Go(func() { t.fail(f()) }) }

// stop stops every task and waits for them.
func (t *tasks) stop() {
	t.cancel(nil)
	t.wg.Wait()
}

// startServers starts the metrics and probe server (/healthz: healthz,
// the leader's lease; /readyz: the webhook's certificate) and, with
// --webhook, the admission webhook with its certificates.
func startServers(ctx context.Context, t *tasks, o options, kube kubernetes.Interface, healthz *leaderelection.HealthzAdaptor, metrics *webhook.Metrics) error {
	var certs webhook.CertificateSource
	static := &webhook.StaticCertificate{}
	if o.webhook {
		switch o.tlsMode {
		case tlsFiles:
			certs = &webhook.FileCertificate{CertFile: o.certFile, KeyFile: o.keyFile}
		case tlsSelfSigned:
			certs = static
		}
	}
	probes := &probes{
		live: func() error { return healthz.Check(nil) },
		ready: func() error {
			if certs == nil {
				return nil
			}
			_, err := certs.GetCertificate(nil)
			return err
		},
	}
	httpListener, err := net.Listen("tcp", o.httpAddress)
	if err != nil {
		return fmt.Errorf("--http-address: %w", err)
	}
	t.run(func() error { return serveHTTP(ctx, httpListener, probes) })
	if !o.webhook {
		return nil
	}
	listener, err := net.Listen("tcp", o.webhookAddress)
	if err != nil {
		return fmt.Errorf("--webhook-address: %w", err)
	}
	if o.tlsMode == tlsSelfSigned {
		t.run(func() error { return keepSelfSigned(ctx, kube, o, static) })
	}
	handler := webhook.NewHandler(o.driverName, metrics)
	t.run(func() error { return webhook.Serve(ctx, listener, handler, certs) })
	return nil
}

// newReconcile returns what the leader runs: the DeviceClass reconciler
// and the claim router, each with --workers, until ctx ends.
func newReconcile(ctx context.Context, t *tasks, o options, kube kubernetes.Interface, dyn dynamic.Interface, metrics *controller.Metrics) (func(context.Context), error) {
	c, err := controller.New(ctx, controller.Config{
		DriverName:             o.driverName,
		ExtendedResourceDomain: o.extendedResourceDomain,
		KubeClient:             kube,
		DynamicClient:          dyn,
		ResyncPeriod:           o.resyncPeriod,
		Metrics:                metrics,
	})
	if err != nil {
		return nil, err
	}
	router, err := controller.NewClaimRouter(o.driverName, kube)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		var leaderWG sync.WaitGroup
		leaderWG.Go(func() { t.fail(router.Run(ctx, o.workers)) })
		t.fail(c.Run(ctx, o.workers))
		leaderWG.Wait()
	}, nil
}

// validate checks flag combinations.
func (o options) validate() error {
	if o.namespace == "" && (o.leaderElect || (o.webhook && o.tlsMode == tlsSelfSigned)) {
		return errors.New("--namespace (or $POD_NAMESPACE) is required: the namespace of the leader election Lease and the webhook Secret")
	}
	if o.webhook && o.tlsMode != tlsSelfSigned && o.tlsMode != tlsFiles {
		return fmt.Errorf("--webhook-tls %q: use %s or %s", o.tlsMode, tlsSelfSigned, tlsFiles)
	}
	if d := o.extendedResourceDomain; d != "" {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			return fmt.Errorf("--extended-resource-domain %q is not a DNS subdomain (%s): use e.g. fpga.dra.dev or fpga.intel.com, or empty for none", d, strings.Join(errs, "; "))
		}
		// The API server's rule for extendedResourceName
		// (IsExtendedResourceName), checked with the longest name.
		sample := d + "/af-000.000." + strings.Repeat("A", 43)
		if strings.Contains(sample, "kubernetes.io/") || strings.HasPrefix(sample, "requests.") || len(validation.IsQualifiedName("requests."+sample)) > 0 {
			return fmt.Errorf("--extended-resource-domain %q: the API server refuses extended resource names in it (the kubernetes.io domains are reserved, a name may not start with requests., and requests.<domain> must fit in 253 characters): use e.g. fpga.dra.dev or fpga.intel.com, or empty for none", d)
		}
	}
	return nil
}

// certRound is the time between two rounds of keepSelfSigned.
const certRound = 5 * time.Minute

// keepSelfSigned loads (or creates) the self-signed certificates, serves
// them and keeps the webhook configuration's caBundle set (webhook.Keeper):
// at start and every few minutes, which also undoes a re-applied
// configuration without caBundle and picks up certificates another replica
// replaced. It returns only when ctx is done.
func keepSelfSigned(ctx context.Context, kube kubernetes.Interface, o options, static *webhook.StaticCertificate) error {
	logger := klog.FromContext(ctx)
	k := &webhook.Keeper{
		Certs: &webhook.SelfSigned{
			Client:      kube,
			Namespace:   o.namespace,
			SecretName:  o.secretName,
			DNSNames:    webhook.ServiceDNSNames(o.serviceName, o.namespace),
			Validity:    o.certValidity,
			RenewBefore: o.certValidity / 10,
		},
		Serving: static,
		PatchBundle: func(ctx context.Context, caBundle []byte) error {
			return webhook.PatchCABundle(ctx, kube, o.webhookConfig, caBundle)
		},
		Period: certRound,
	}
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if err := k.Round(ctx); err != nil {
			logger.Error(err, "Keeping the webhook's certificates and CA bundle failed; retrying")
		}
	}, certRound, 0.1, false)
	return nil
}
