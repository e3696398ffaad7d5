package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
)

var testDNSNames = ServiceDNSNames("fpga-dra-controller-webhook", "fpga-system")

func generate(t *testing.T, now time.Time, validity time.Duration) *Certificates {
	t.Helper()
	c, err := GenerateCertificates(testDNSNames, now, validity)
	if err != nil {
		t.Fatalf("GenerateCertificates() error = %v", err)
	}
	return c
}

func TestCertificatesCheck(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := generate(t, now, 365*24*time.Hour)
	if err := c.Check(testDNSNames, now, 30*24*time.Hour); err != nil {
		t.Errorf("Check() of fresh certificates = %v", err)
	}
	if err := c.Check([]string{"other.fpga-system.svc"}, now, 0); err == nil || !strings.Contains(err.Error(), "other.fpga-system.svc") {
		t.Errorf("Check() for another name = %v, want an error naming it", err)
	}
	if err := c.Check(testDNSNames, now, 400*24*time.Hour); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Check() past expiry = %v, want an expiry error", err)
	}
	other := generate(t, now, time.Hour)
	mixed := &Certificates{CACert: other.CACert, Cert: c.Cert, Key: c.Key}
	if err := mixed.Check(testDNSNames, now, 0); err == nil {
		t.Error("Check() with a foreign CA = nil, want an error")
	}
	if err := (&Certificates{CACert: c.CACert, Cert: c.Cert, Key: other.Key}).Check(testDNSNames, now, 0); err == nil {
		t.Error("Check() with a foreign key = nil, want an error")
	}
}

// TestServeTLS calls the webhook over TLS as the API server does: trusting
// only the CA bundle, by the Service's DNS name.
func TestServeTLS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	certs := generate(t, time.Now(), time.Hour)
	static := &StaticCertificate{}
	if _, err := static.GetCertificate(nil); err == nil {
		t.Error("GetCertificate() before Set = nil error, want one")
	}
	if err := static.Set(certs.Cert, certs.Key); err != nil {
		t.Fatal(err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, listener, NewHandler(driverName, nil), static) }()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(certs.CACert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: testDNSNames[0]}}}
	resp, err := client.Post("https://"+listener.Addr().String()+ValidatePath, "application/json", bytes.NewReader(
		review("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", admissionv1.Create,
			claim("resource.k8s.io/v1", opaque(driverName, fpgaConfig(`"afuID":"`+afuID+`"`))))))
	if err != nil {
		t.Fatalf("POST over TLS: %v", err)
	}
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || out.Response == nil || !out.Response.Allowed {
		t.Errorf("answer = %+v, %v; want allowed", out.Response, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve() error = %v", err)
	}
}

func TestSelfSignedEnsure(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := kubefake.NewClientset()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &SelfSigned{Client: client, Namespace: "fpga-system", SecretName: "webhook-tls", DNSNames: testDNSNames,
		Validity: 100 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour, Now: func() time.Time { return now }}

	first, err := s.Ensure(ctx)
	if err != nil {
		t.Fatalf("Ensure() error = %v", err)
	}
	secret, err := client.CoreV1().Secrets("fpga-system").Get(ctx, "webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Secret was not created: %v", err)
	}
	if !bytes.Equal(secret.Data[SecretCAKey], first.CACert) || !bytes.Equal(secret.Data[SecretCertKey], first.Cert) || secret.Type != "kubernetes.io/tls" {
		t.Errorf("Secret = %+v, want the returned certificates", secret)
	}

	// Another replica (or a restart) gets the same certificates.
	second, err := s.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(second.CACert, first.CACert) || !bytes.Equal(second.Key, first.Key) {
		t.Error("a second Ensure() replaced valid certificates")
	}

	// Close to expiry they are replaced.
	now = now.Add(95 * 24 * time.Hour)
	third, err := s.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(third.CACert, first.CACert) {
		t.Error("Ensure() kept certificates that expire within RenewBefore")
	}
	if err := third.Check(testDNSNames, now, s.RenewBefore); err != nil {
		t.Errorf("replaced certificates do not serve: %v", err)
	}
}

func TestPatchCABundle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "fpga-dra-driver"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "claims.fpga.dra.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: "fpga-system", Name: "fpga-dra-controller-webhook"}}},
			{Name: "url.fpga.dra.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptrTo("https://example.com/validate")}},
		},
	}
	client := kubefake.NewClientset(config)
	if err := PatchCABundle(ctx, client, "fpga-dra-driver", []byte("CA")); err != nil {
		t.Fatalf("PatchCABundle() error = %v", err)
	}
	got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "fpga-dra-driver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Webhooks[0].ClientConfig.CABundle) != "CA" || got.Webhooks[1].ClientConfig.CABundle != nil {
		t.Errorf("caBundles = %q, %q; want CA on the service webhook only", got.Webhooks[0].ClientConfig.CABundle, got.Webhooks[1].ClientConfig.CABundle)
	}
	updates := 0
	if err := PatchCABundle(ctx, client, "fpga-dra-driver", []byte("CA")); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			updates++
		}
	}
	if updates != 1 {
		t.Errorf("%d updates, want 1: an unchanged caBundle is not written again", updates)
	}
	if err := PatchCABundle(ctx, client, "missing", []byte("CA")); err == nil || !strings.Contains(err.Error(), "ValidatingWebhookConfiguration missing") {
		t.Errorf("PatchCABundle(missing) = %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestFileCertificateReloads checks that a renewed certificate in the files
// is served without a restart, and that a broken write keeps the last good
// one.
func TestFileCertificateReloads(t *testing.T) {
	dir := t.TempDir()
	f := &FileCertificate{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if _, err := f.GetCertificate(nil); err == nil {
		t.Error("GetCertificate() without files = nil error")
	}
	write := func(c *Certificates, mtime time.Time) {
		t.Helper()
		for name, data := range map[string][]byte{f.CertFile: c.Cert, f.KeyFile: c.Key} {
			if err := os.WriteFile(name, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(name, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	leaf := func() []byte {
		t.Helper()
		c, err := f.GetCertificate(nil)
		if err != nil {
			t.Fatalf("GetCertificate() error = %v", err)
		}
		return c.Certificate[0]
	}
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	first, second := generate(t, time.Now(), time.Hour), generate(t, time.Now(), time.Hour)
	write(first, base)
	a := leaf()
	write(second, base.Add(time.Minute))
	b := leaf()
	if bytes.Equal(a, b) {
		t.Error("the renewed certificate was not loaded")
	}
	if err := os.WriteFile(f.KeyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(f.KeyFile, base.Add(2*time.Minute), base.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c := leaf(); !bytes.Equal(c, b) {
		t.Error("a broken key replaced the last good certificate")
	}
}

// trusted fails unless the certificate s serves verifies against caBundle
// for every test DNS name at now.
func trusted(t *testing.T, who string, s *StaticCertificate, caBundle []byte, now time.Time) {
	t.Helper()
	c, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatalf("%s serves nothing: %v", who, err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		t.Fatalf("CA bundle %q holds no certificate", caBundle)
	}
	for _, name := range testDNSNames {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
			t.Fatalf("%s serves a certificate the API server does not trust: %v", who, err)
		}
	}
}

// pemCount is how many PEM certificates b holds.
func pemCount(b []byte) int { return bytes.Count(b, []byte("-----BEGIN CERTIFICATE-----")) }

// TestRenewalKeepsThePreviousCA: renewed certificates come with a CA
// bundle that also trusts the certificate they replace (a replica may
// still serve it), and only that one: the bundle does not grow.
func TestRenewalKeepsThePreviousCA(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &SelfSigned{Client: kubefake.NewClientset(), Namespace: "fpga-system", SecretName: "webhook-tls", DNSNames: testDNSNames,
		Validity: 100 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour, Now: func() time.Time { return now }}
	var rounds []*Certificates
	var times []time.Time
	for range 3 {
		c, err := s.Ensure(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rounds, times = append(rounds, c), append(times, now)
		now = now.Add(95 * 24 * time.Hour)
	}
	if n := pemCount(rounds[0].CACert); n != 1 {
		t.Errorf("first CA bundle holds %d certificates, want 1", n)
	}
	for i := 1; i < len(rounds); i++ {
		if n := pemCount(rounds[i].CACert); n != 2 {
			t.Errorf("CA bundle of renewal %d holds %d certificates, want 2 (its CA and the previous one)", i, n)
		}
		for _, c := range rounds[i-1 : i+1] {
			if err := (&Certificates{CACert: rounds[i].CACert, Cert: c.Cert, Key: c.Key}).Check(testDNSNames, times[i], 0); err != nil {
				t.Errorf("renewal %d's CA bundle does not trust a certificate served when it was made: %v", i, err)
			}
		}
	}
}

// testKeeper is a replica's Keeper of self-signed certificates in client's
// Secret, valid 100 days and renewed 10 days before expiry, whose clock is
// *now plus skew; it sets *bundle as the webhook configuration's CA bundle.
func testKeeper(client *kubefake.Clientset, now *time.Time, skew time.Duration, bundle *[]byte) *Keeper {
	return &Keeper{
		Certs: &SelfSigned{Client: client, Namespace: "fpga-system", SecretName: "webhook-tls", DNSNames: testDNSNames,
			Validity: 100 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour, Now: func() time.Time { return now.Add(skew) }},
		Serving:     &StaticCertificate{},
		PatchBundle: func(_ context.Context, b []byte) error { *bundle = bytes.Clone(b); return nil },
		Period:      5 * time.Minute,
	}
}

// TestKeeperSwitchesARoundLater: two replicas keep the certificates
// through a renewal one of them makes; whatever either serves, at every
// step, is trusted by the CA bundle the webhook configuration has then.
// A new certificate is served from the round after its bundle was set.
func TestKeeperSwitchesARoundLater(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	client := kubefake.NewClientset()
	var bundle []byte
	a, b := testKeeper(client, &now, 0, &bundle), testKeeper(client, &now, 0, &bundle)
	round := func(name string, k *Keeper) {
		t.Helper()
		if err := k.Round(ctx); err != nil {
			t.Fatalf("round of %s: %v", name, err)
		}
		trusted(t, "replica a", a.Serving, bundle, now)
		if b.Serving.cert.Load() != nil {
			trusted(t, "replica b", b.Serving, bundle, now)
		}
	}
	round("a", a)
	round("b", b)
	first, _ := a.Serving.GetCertificate(nil)

	now = now.Add(95 * 24 * time.Hour) // within RenewBefore: a renews
	round("a", a)
	if c, _ := a.Serving.GetCertificate(nil); !bytes.Equal(c.Certificate[0], first.Certificate[0]) {
		t.Fatal("replica a serves its new certificate in the round that set its CA bundle")
	}
	round("b", b)
	now = now.Add(5 * time.Minute)
	round("a", a)
	round("b", b)
	for name, k := range map[string]*Keeper{"a": a, "b": b} {
		if c, _ := k.Serving.GetCertificate(nil); bytes.Equal(c.Certificate[0], first.Certificate[0]) {
			t.Errorf("replica %s still serves the replaced certificate a round after the bundle trusted the new one", name)
		}
	}
}

// TestKeeperSecretReplaced: the Secret is deleted (or replaced by
// someone else, e.g. a re-install); the replica that creates the new one
// sets a bundle without the CA of the certificate it serves, and must not
// go on serving that certificate: the API server no longer trusts it.
func TestKeeperSecretReplaced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	client := kubefake.NewClientset()
	var bundle []byte
	k := testKeeper(client, &now, 0, &bundle)
	roundThenTrusted(ctx, t, k, "replica", k.Serving, &bundle, now)
	if err := client.CoreV1().Secrets("fpga-system").Delete(ctx, "webhook-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Minute)
	roundThenTrusted(ctx, t, k, "replica after the Secret was replaced", k.Serving, &bundle, now)
}

// TestKeeperClockSkew: replica b's clock is two minutes behind a's;
// the certificates a made are not yet valid by b's clock, so b replaces
// them. The bundle b sets must still trust what a serves.
func TestKeeperClockSkew(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var bundle []byte
	a, b := skewedReplicas(&now, &bundle)
	roundThenTrusted(ctx, t, a, "replica a", a.Serving, &bundle, now)
	// The API server's clock is a's.
	roundThenTrusted(ctx, t, b, "replica a after b's round", a.Serving, &bundle, now)
}

// skewedReplicas are two replicas of one Secret and bundle whose clocks
// read *now (a) and two minutes behind it (b).
func skewedReplicas(now *time.Time, bundle *[]byte) (a, b *Keeper) {
	client := kubefake.NewClientset()
	return testKeeper(client, now, 0, bundle), testKeeper(client, now, -2*time.Minute, bundle)
}

// roundThenTrusted runs a round of k and fails unless what s serves is
// trusted by the CA bundle set then (*bundle) at now.
func roundThenTrusted(ctx context.Context, t *testing.T, k *Keeper, who string, s *StaticCertificate, bundle *[]byte, now time.Time) {
	t.Helper()
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	trusted(t, who, s, *bundle, now)
}

// TestKeeperServesAtOnce: a replica that serves nothing yet serves the
// certificates at once, even when there is no webhook configuration to set
// the CA bundle in yet (the next round sets it); one whose certificate would expire before the next round
// switches at once.
func TestKeeperServesAtOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var patchErr error = apierrors.NewNotFound(admissionregistrationv1.Resource("validatingwebhookconfigurations"), "fpga-dra-driver-webhook")
	k := &Keeper{
		Certs: &SelfSigned{Client: kubefake.NewClientset(), Namespace: "fpga-system", SecretName: "webhook-tls", DNSNames: testDNSNames,
			Validity: time.Hour, RenewBefore: 6 * time.Minute, Now: func() time.Time { return now }},
		Serving:     &StaticCertificate{},
		PatchBundle: func(context.Context, []byte) error { return patchErr },
		Period:      5 * time.Minute,
	}
	if err := k.Round(ctx); !errors.Is(err, patchErr) {
		t.Fatalf("Round() = %v, want the patch error", err)
	}
	first, err := k.Serving.GetCertificate(nil)
	if err != nil {
		t.Fatalf("nothing served after the first round: %v", err)
	}
	patchErr = nil
	now = now.Add(55 * time.Minute) // renewed; the old one expires in 5 minutes
	if err := k.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := k.Serving.GetCertificate(nil); bytes.Equal(c.Certificate[0], first.Certificate[0]) {
		t.Fatal("a certificate that expires before the next round is still served")
	}
}

// FuzzIssuerOf: whatever a Secret holds, issuerOf does not fail, and what
// it returns is one CA certificate that signed the serving certificate.
func FuzzIssuerOf(f *testing.F) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := GenerateCertificates(testDNSNames, now, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	other, err := GenerateCertificates(testDNSNames, now, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.CACert, c.Cert)
	f.Add(append(bytes.Clone(other.CACert), c.CACert...), c.Cert)
	f.Add(c.Cert, c.CACert)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), c.Cert)
	f.Fuzz(func(t *testing.T, caBundle, cert []byte) {
		got := issuerOf(caBundle, cert, now)
		if len(got) == 0 {
			return
		}
		if pemCount(got) != 1 {
			t.Fatalf("issuerOf returned %d certificates", pemCount(got))
		}
		ca, err := x509.ParseCertificate(derOf(got))
		if err != nil {
			t.Fatalf("issuerOf returned an unparsable certificate: %v", err)
		}
		leaf, err := x509.ParseCertificate(derOf(cert))
		if err != nil || !ca.IsCA || leaf.CheckSignatureFrom(ca) != nil {
			t.Fatalf("issuerOf returned a certificate that did not sign the serving one (%v)", err)
		}
	})
}

// TestKeeperClockSkewDuringRenewal: replica a renews the certificates and,
// as it should, keeps serving the old one for a round; replica b, whose
// clock is two minutes behind, finds a's renewal not yet valid and renews
// again at once. The bundle b sets must still trust the certificate a
// serves: the one both served before the renewals.
func TestKeeperClockSkewDuringRenewal(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var bundle []byte
	a, b := skewedReplicas(&now, &bundle)
	roundThenTrusted(ctx, t, a, "replica a", a.Serving, &bundle, now)
	now = now.Add(5 * time.Minute)
	roundThenTrusted(ctx, t, b, "replica b", b.Serving, &bundle, now)
	trusted(t, "replica a", a.Serving, bundle, now)

	now = now.Add(95 * 24 * time.Hour) // within RenewBefore: a renews
	roundThenTrusted(ctx, t, a, "replica a after its renewal", a.Serving, &bundle, now)
	roundThenTrusted(ctx, t, b, "replica b after its renewal", b.Serving, &bundle, now)
	trusted(t, "replica a after b renewed a's renewal", a.Serving, bundle, now)
}

// TestKeeperNewReplicaWaitsForTheBundle: a replica starts while the
// Secret holds certificates whose CA the webhook configuration does not
// have yet (the replica that renewed them stopped before it set the
// bundle), and it cannot set the bundle either. It must not serve them:
// serving makes it ready, the Service sends it the API server's calls,
// and the API server does not trust it. Once the bundle is set, it serves.
func TestKeeperNewReplicaWaitsForTheBundle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	client := kubefake.NewClientset()
	var bundle []byte
	first := testKeeper(client, &now, 0, &bundle)
	roundThenTrusted(ctx, t, first, "first replica", first.Serving, &bundle, now)
	stale := bytes.Clone(bundle)
	now = now.Add(95 * 24 * time.Hour)
	// The renewal of a replica that stops before it sets the bundle.
	if _, err := first.Certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}

	patchErr := errors.New("etcdserver: request timed out")
	k := testKeeper(client, &now, 0, &bundle)
	k.PatchBundle = func(_ context.Context, b []byte) error {
		if patchErr != nil {
			return patchErr
		}
		bundle = bytes.Clone(b)
		return nil
	}
	if err := k.Round(ctx); !errors.Is(err, patchErr) {
		t.Fatalf("Round() = %v, want the patch error", err)
	}
	if _, err := k.Serving.GetCertificate(nil); err == nil {
		trusted(t, "new replica whose bundle patch failed", k.Serving, stale, now)
	}
	patchErr = nil
	roundThenTrusted(ctx, t, k, "new replica once the bundle is set", k.Serving, &bundle, now)
}
