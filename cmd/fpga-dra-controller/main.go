// Command fpga-dra-controller is the cluster side of the FPGA DRA driver: it
// keeps the DeviceClasses of AcceleratorFunctions and FpgaRegions (leader
// elected when several replicas run) and serves the validating admission
// webhook for FpgaConfigs in ResourceClaims and ResourceClaimTemplates and
// for the custom resources (every replica), with Prometheus metrics and
// health probes.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/flagenv"
	"github.com/fpga-dra/fpga-dra-driver/internal/kubeclient"
	"github.com/fpga-dra/fpga-dra-driver/internal/logging"
	"github.com/fpga-dra/fpga-dra-driver/internal/version"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// options are the controller's flags.
type options struct {
	kube       kubeclient.Flags
	driverName string
	namespace  string
	identity   string

	workers      int
	resyncPeriod time.Duration

	leaderElect                                            bool
	leaseName                                              string
	leaseDuration, renewDeadline, retryPeriod, healthSlack time.Duration

	httpAddress string

	extendedResourceDomain string

	webhook        bool
	webhookAddress string
	tlsMode        string
	certFile       string
	keyFile        string
	secretName     string
	serviceName    string
	webhookConfig  string
	certValidity   time.Duration
}

// TLS modes of the webhook.
const (
	tlsSelfSigned = "self-signed"
	tlsFiles      = "files"
)

func newRootCommand() *cobra.Command {
	var o options
	logs := logging.New()
	cmd := &cobra.Command{
		Use:           "fpga-dra-controller",
		Short:         "DeviceClasses for AcceleratorFunctions and FpgaRegions, and the admission webhook of the FPGA DRA driver",
		Version:       version.String(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagenv.Apply(cmd.Flags()); err != nil {
				return err
			}
			if err := logs.Apply(); err != nil {
				return err
			}
			return run(cmd.Context(), o)
		},
	}
	host, _ := os.Hostname()
	fs := cmd.Flags()
	o.kube.AddFlags(fs, 20, 40)
	fs.StringVar(&o.driverName, "driver-name", v1alpha1.DriverName, "DRA driver name: the driver of the devices DeviceClasses select and of the opaque configs the webhook checks")
	fs.StringVar(&o.extendedResourceDomain, "extended-resource-domain", v1alpha1.DriverName, "domain of the extended resource name each AcceleratorFunction's class serves (the device-plugin endpoint's names, e.g. fpga.intel.com for pod specs written for the Intel FPGA device plugin); empty: none")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the leader election Lease and the webhook certificate Secret (required)")
	fs.StringVar(&o.identity, "identity", host, "leader election identity of this replica")
	fs.IntVar(&o.workers, "workers", 2, "objects reconciled in parallel")
	fs.DurationVar(&o.resyncPeriod, "resync-period", 10*time.Minute, "how often every object is reconciled again without a change (0: never)")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "reconcile only while holding the leader election Lease (required with more than one replica)")
	fs.StringVar(&o.leaseName, "leader-election-lease-name", "fpga-dra-controller", "name of the leader election Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long followers wait before taking over an unrenewed lease")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing before giving up the lease")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often the lease is tried")
	fs.DurationVar(&o.healthSlack, "leader-election-health-timeout", 20*time.Second, "/healthz fails when the leader has not renewed its lease for the lease duration plus this")
	fs.StringVar(&o.httpAddress, "http-address", ":8080", "address of the plain HTTP endpoints /metrics, /healthz and /readyz")
	fs.BoolVar(&o.webhook, "webhook", true, "serve the validating admission webhook")
	fs.StringVar(&o.webhookAddress, "webhook-address", ":9443", "address of the TLS admission webhook")
	fs.StringVar(&o.tlsMode, "webhook-tls", tlsSelfSigned, "where the webhook certificate comes from: self-signed (generated, kept in --webhook-secret-name, CA patched into --webhook-configuration) or files (--webhook-cert-file and --webhook-key-file, e.g. from cert-manager; reloaded when they change)")
	fs.StringVar(&o.certFile, "webhook-cert-file", "/etc/fpga-dra-controller/tls/tls.crt", "serving certificate with --webhook-tls=files")
	fs.StringVar(&o.keyFile, "webhook-key-file", "/etc/fpga-dra-controller/tls/tls.key", "serving key with --webhook-tls=files")
	fs.StringVar(&o.secretName, "webhook-secret-name", "fpga-dra-controller-webhook-tls", "Secret holding the self-signed certificates")
	fs.StringVar(&o.serviceName, "webhook-service-name", "fpga-dra-controller-webhook", "Service in front of the webhook: the self-signed certificate's DNS names")
	fs.StringVar(&o.webhookConfig, "webhook-configuration", "fpga-dra-driver", "ValidatingWebhookConfiguration whose caBundle the self-signed mode sets")
	fs.DurationVar(&o.certValidity, "webhook-cert-validity", 10*365*24*time.Hour, "validity of self-signed certificates; they are replaced a tenth of it before expiry")
	flagenv.Twins(fs, map[string]string{
		"kubeconfig":               "KUBECONFIG",
		"driver-name":              "DRIVER_NAME",
		"extended-resource-domain": "EXTENDED_RESOURCE_DOMAIN",
		"namespace":                "POD_NAMESPACE",
		"identity":                 "POD_NAME",
		"http-address":             "HTTP_ADDRESS",
		"webhook-address":          "WEBHOOK_ADDRESS",
		"webhook-tls":              "WEBHOOK_TLS",
		"webhook-secret-name":      "WEBHOOK_SECRET_NAME",
		"webhook-service-name":     "WEBHOOK_SERVICE_NAME",
		"webhook-configuration":    "WEBHOOK_CONFIGURATION",
	})
	logs.AddFlags(fs)
	return cmd
}
