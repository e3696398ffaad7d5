package webhook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Certificates are a self-signed CA and a serving certificate it signed, PEM
// encoded: what the webhook serves with and what the API server trusts.
type Certificates struct {
	CACert []byte // the CA certificate: the webhook configuration's caBundle
	Cert   []byte // the serving certificate
	Key    []byte // the serving certificate's private key (PKCS #8)
}

// GenerateCertificates creates a CA and a serving certificate for dnsNames,
// both valid from now (less a minute of clock skew) for validity. Keys are
// ECDSA P-256.
func GenerateCertificates(dnsNames []string, now time.Time, validity time.Duration) (*Certificates, error) {
	if len(dnsNames) == 0 {
		return nil, errors.New("generate webhook certificates: no DNS name to serve")
	}
	notBefore, notAfter := now.Add(-time.Minute), now.Add(validity)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fpga-dra-controller webhook CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode serving key: %w", err)
	}
	return &Certificates{
		CACert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		Key:    pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// serial returns a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		// crypto/rand never fails on Linux.
		panic(err)
	}
	return n
}

// Check returns why c cannot serve every one of dnsNames until now+margin,
// verified against its own CA, or nil when it can.
func (c *Certificates) Check(dnsNames []string, now time.Time, margin time.Duration) error {
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return fmt.Errorf("serving certificate and key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("parse serving certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CACert) {
		return errors.New("CA certificate: no PEM certificate found")
	}
	for _, at := range []time.Time{now, now.Add(margin)} {
		for _, name := range dnsNames {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: at,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("serving certificate at %s for %s: %w", at.UTC().Format(time.RFC3339), name, err)
			}
		}
	}
	return nil
}

// ServiceDNSNames are the names the API server may use to call the webhook
// behind a Service: service.namespace.svc first (what it uses), then the
// longer and shorter forms.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
		service + "." + namespace,
		service,
	}
}
