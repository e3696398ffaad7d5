package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"iter"
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
// replace it end up with the winner's certificates. A replacement's CA
// bundle keeps the CA that signed the certificate it replaces while that
// CA is valid, so that replicas still serving the old certificate stay
// trusted until they switch (Keeper).
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
		if err == nil {
			fresh.CACert = append(fresh.CACert, previousCAs(secret.Data[SecretCAKey], secret.Data[SecretCertKey], now())...)
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

// maxPreviousCAs bounds how many CAs of the bundle it replaces a new CA
// bundle keeps.
const maxPreviousCAs = 2

// previousCAs returns, PEM encoded, the CAs of caBundle a new bundle keeps:
// issuerOf the Secret's serving certificate first, then the other CAs of
// caBundle still valid at now, up to maxPreviousCAs in all. The others
// matter when certificates are replaced twice within a round (a replica
// whose clock is behind replaces a renewal that is not yet valid by its
// clock): a replica that has not switched to the first replacement still
// serves a certificate of one of them.
func previousCAs(caBundle, certPEM []byte, now time.Time) []byte {
	out := issuerOf(caBundle, certPEM, now)
	kept := min(len(out), 1)
	for block, ca := range caCerts(caBundle) {
		if kept == maxPreviousCAs {
			break
		}
		if !now.Before(ca.NotAfter) || bytes.Equal(block.Bytes, derOf(out)) {
			continue
		}
		out = append(out, pem.EncodeToMemory(block)...)
		kept++
	}
	return out
}

// issuerOf returns, PEM encoded, the certificate of caBundle that signed
// the serving certificate certPEM, when both parse and it is valid at now;
// nothing otherwise.
func issuerOf(caBundle, certPEM []byte, now time.Time) []byte {
	leaf, err := x509.ParseCertificate(derOf(certPEM))
	if err != nil {
		return nil
	}
	// Not before NotBefore: a replica whose clock is behind (it replaces
	// certificates not yet valid by its clock) must keep the CA of what
	// the others serve.
	if block := issuerIn(caBundle, leaf, func(ca *x509.Certificate) bool { return now.Before(ca.NotAfter) }); block != nil {
		return pem.EncodeToMemory(block)
	}
	return nil
}

// issuerIn returns the PEM block of the first CA certificate of caBundle
// that signed leaf and that also passes ok; nil when there is none.
func issuerIn(caBundle []byte, leaf *x509.Certificate, ok func(ca *x509.Certificate) bool) *pem.Block {
	for block, ca := range caCerts(caBundle) {
		if leaf.CheckSignatureFrom(ca) == nil && ok(ca) {
			return block
		}
	}
	return nil
}

// caCerts yields the PEM blocks of caBundle that are CA certificates, each
// with its certificate, in the bundle's order.
func caCerts(caBundle []byte) iter.Seq2[*pem.Block, *x509.Certificate] {
	return func(yield func(*pem.Block, *x509.Certificate) bool) {
		for rest := caBundle; ; {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				return
			}
			if ca, err := x509.ParseCertificate(block.Bytes); err == nil && ca.IsCA && !yield(block, ca) {
				return
			}
		}
	}
}

// Keeper serves the self-signed certificates of a SelfSigned and keeps the
// webhook configuration's CA bundle set (Round, every few minutes). A
// certificate new to it is served only from the round after the one that
// put its CA bundle in the configuration: by then the API server trusts
// it, and every replica still serving the previous one stays trusted
// (Ensure keeps the previous CA in the bundle). Only when it serves
// nothing yet, or its certificate would expire before the next round,
// does it switch at once; a replica that serves nothing yet waits for a
// round that set the bundle, since serving makes it ready.
type Keeper struct {
	Certs *SelfSigned
	// Serving is what the webhook serves with.
	Serving *StaticCertificate
	// PatchBundle sets the webhook configuration's CA bundle
	// (PatchCABundle).
	PatchBundle func(ctx context.Context, caBundle []byte) error
	// Period is the time between rounds.
	Period time.Duration

	// pending is the Secret's certificate whose CA bundle the previous
	// round set, not served yet.
	pending []byte
}

// Round loads (or creates, or renews) the certificates, sets the CA bundle
// and switches what is served as the type describes. It returns what went
// wrong; the next round tries again.
func (k *Keeper) Round(ctx context.Context) error {
	now := time.Now
	if k.Certs.Now != nil {
		now = k.Certs.Now
	}
	certs, err := k.Certs.Ensure(ctx)
	if err != nil {
		return err
	}
	patchErr := k.PatchBundle(ctx, certs.CACert)
	served := k.Serving.cert.Load()
	switch {
	case served != nil && bytes.Equal(served.Certificate[0], derOf(certs.Cert)):
		k.pending = nil
		return patchErr
	case served == nil && (patchErr == nil || apierrors.IsNotFound(patchErr)), served != nil && served.Leaf != nil && served.Leaf.NotAfter.Before(now().Add(2*k.Period)),
		patchErr == nil && bytes.Equal(k.pending, certs.Cert),
		patchErr == nil && !signedBy(served, certs.CACert):
		// Nothing served and the bundle set (or no webhook
		// configuration to set it in: nothing calls the webhook), the
		// served certificate about to expire, the
		// bundle trusted this certificate a round ago, or the bundle
		// just set does not trust the served one (the Secret was
		// replaced: its bundle has not the previous CA).
	default:
		if patchErr == nil {
			k.pending = certs.Cert
		}
		return patchErr
	}
	k.pending = nil
	if err := k.Serving.Set(certs.Cert, certs.Key); err != nil {
		return errors.Join(err, patchErr)
	}
	return patchErr
}

// signedBy reports whether a CA of caBundle signed c's leaf.
func signedBy(c *tls.Certificate, caBundle []byte) bool {
	if len(c.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return false
	}
	return issuerIn(caBundle, leaf, func(*x509.Certificate) bool { return true }) != nil
}

// derOf is the DER of the first PEM block of b (nil when there is none).
func derOf(b []byte) []byte {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil
	}
	return block.Bytes
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
