package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"
)

// WaitHTTP polls a plain-HTTP health URL until it answers 200, p (when
// not nil) exits, or 90 seconds pass.
func (c *Cluster) WaitHTTP(ctx context.Context, p *Process, url string) error {
	return c.waitHTTP(ctx, p, url, nil)
}

func (c *Cluster) waitHTTP(ctx context.Context, p *Process, url string, tlsCfg *tls.Config) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c.waitFor(ctx, p, 90*time.Second, func() error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// WaitFor polls ok until it succeeds, p (when not nil) exits, or the
// timeout; the error then says which, with p's last log lines.
func (c *Cluster) WaitFor(ctx context.Context, p *Process, timeout time.Duration, ok func() error) error {
	return c.waitFor(ctx, p, timeout, ok)
}

// waitFor polls ok until it succeeds, the process (when not nil) exits, or
// the timeout. Polling is how one waits for another process's readiness.
func (c *Cluster) waitFor(ctx context.Context, p *Process, timeout time.Duration, ok func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = ok(); last == nil {
			return nil
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); last log lines:\n%s", p.name, err, p.Tail(20))
		}
		if time.Now().After(deadline) {
			if p == nil {
				return fmt.Errorf("not ready after %s: %v", timeout, last)
			}
			return fmt.Errorf("%s not ready after %s: %v; last log lines:\n%s", p.name, timeout, last, p.Tail(20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
