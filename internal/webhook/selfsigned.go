package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// Secret keys of the self-signed certificates, as cert-manager names them.
const (
	SecretCAKey   = "ca.crt"
	SecretCertKey = corev1.TLSCertKey
	SecretKeyKey  = corev1.TLSPrivateKeyKey
)

// SelfSigned keeps self-signed webhook certificates in a Secret, so that
// every replica of the controller serves with the same certificate and the
// webhook configuration trusts one CA.
type SelfSigned struct {
	Client kubernetes.Interface
	// Namespace and SecretName locate the Secret (type kubernetes.io/tls,
	// with ca.crt).
	Namespace, SecretName string
	// DNSNames are the names the certificate serves (ServiceDNSNames).
	DNSNames []string
	// Validity of new certificates.
	Validity time.Duration
	// RenewBefore: certificates that expire sooner are replaced.
	RenewBefore time.Duration
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
}

// Ensure returns the certificates in the Secret. It creates the Secret when
// it is missing and replaces its certificates when they do not serve
// DNSNames or expire within RenewBefore. Replicas racing to create or
// replace it end up with the winner's certificates.
func (s *SelfSigned) Ensure(ctx context.Context) (*Certificates, error) {
	logger := klog.FromContext(ctx)
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	var certs *Certificates
	err := retry.OnError(retry.DefaultRetry, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		secret, err := secrets.Get(ctx, s.SecretName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("get Secret %s/%s: %w", s.Namespace, s.SecretName, err)
		}
		if err == nil {
			have := &Certificates{CACert: secret.Data[SecretCAKey], Cert: secret.Data[SecretCertKey], Key: secret.Data[SecretKeyKey]}
			why := have.Check(s.DNSNames, now(), s.RenewBefore)
			if why == nil {
				certs = have
				return nil
			}
			logger.Info("Replacing the webhook certificates", "secret", klog.KObj(secret), "reason", why)
		}
		fresh, genErr := GenerateCertificates(s.DNSNames, now(), s.Validity)
		if genErr != nil {
			return genErr
		}
		data := map[string][]byte{SecretCAKey: fresh.CACert, SecretCertKey: fresh.Cert, SecretKeyKey: fresh.Key}
		if apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: s.SecretName, Namespace: s.Namespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "fpga-dra-controller"}},
				Type: corev1.SecretTypeTLS,
				Data: data,
			}, metav1.CreateOptions{})
		} else {
			secret = secret.DeepCopy()
			secret.Data = data
			_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		logger.Info("Stored new webhook certificates", "secret", klog.KRef(s.Namespace, s.SecretName), "dnsNames", s.DNSNames)
		certs = fresh
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("self-signed webhook certificates in Secret %s/%s: %w", s.Namespace, s.SecretName, err)
	}
	return certs, nil
}

// PatchCABundle sets caBundle on every webhook of the
// ValidatingWebhookConfiguration configName that calls a Service (webhooks
// called by URL are left alone). It writes only when a caBundle differs.
func PatchCABundle(ctx context.Context, client kubernetes.Interface, configName string, caBundle []byte) error {
	if len(caBundle) == 0 {
		return errors.New("patch caBundle: the CA bundle is empty")
	}
	configs := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		config, err := configs.Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		config = config.DeepCopy()
		changed := false
		for i := range config.Webhooks {
			cc := &config.Webhooks[i].ClientConfig
			if cc.Service != nil && !bytes.Equal(cc.CABundle, caBundle) {
				cc.CABundle = caBundle
				changed = true
			}
		}
		if !changed {
			return nil
		}
		if _, err := configs.Update(ctx, config, metav1.UpdateOptions{FieldManager: "fpga-dra-controller"}); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Set the CA bundle of the webhook configuration", "validatingWebhookConfiguration", configName)
		return nil
	})
	if err != nil {
		return fmt.Errorf("patch caBundle of ValidatingWebhookConfiguration %s: %w", configName, err)
	}
	return nil
}
