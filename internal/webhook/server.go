package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// ValidatePath is the URL path the webhook configuration calls.
const ValidatePath = "/validate"

// CertificateSource supplies the serving certificate for each TLS
// handshake.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// StaticCertificate serves one certificate, replaceable at run time.
type StaticCertificate struct {
	cert atomic.Pointer[tls.Certificate]
}

// Set replaces the certificate served from the next handshake on.
func (s *StaticCertificate) Set(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("load the webhook's serving certificate: %w", err)
	}
	s.cert.Store(&pair)
	return nil
}

// GetCertificate implements CertificateSource.
func (s *StaticCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the webhook has no serving certificate yet")
}

// FileCertificate serves the certificate in CertFile and KeyFile (as a
// cert-manager Secret mounted as a volume provides them) and reloads them
// when either file changes, so a renewed certificate is used without a
// restart.
type FileCertificate struct {
	CertFile, KeyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime [2]time.Time
}

// GetCertificate implements CertificateSource. A file that cannot be read
// keeps the last good certificate in use.
func (f *FileCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var mod [2]time.Time
	for i, name := range []string{f.CertFile, f.KeyFile} {
		st, err := os.Stat(name)
		if err != nil {
			if f.cert != nil {
				return f.cert, nil
			}
			return nil, fmt.Errorf("webhook serving certificate: %w", err)
		}
		mod[i] = st.ModTime()
	}
	if f.cert != nil && mod == f.modTime {
		return f.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		if f.cert != nil {
			return f.cert, nil
		}
		return nil, fmt.Errorf("load webhook serving certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
	}
	f.cert, f.modTime = &pair, mod
	return f.cert, nil
}

// Serve serves handler at ValidatePath over TLS on listener until ctx is
// done, then shuts down gracefully.
func Serve(ctx context.Context, listener net.Listener, handler http.Handler, certs CertificateSource) error {
	logger := klog.FromContext(ctx)
	mux := http.NewServeMux()
	mux.Handle(ValidatePath, handler)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.GetCertificate,
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	logger.Info("Serving the admission webhook", "address", listener.Addr().String(), "path", ValidatePath)
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(listener, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("serve the admission webhook: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down the admission webhook: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve the admission webhook: %w", err)
	}
	return nil
}
