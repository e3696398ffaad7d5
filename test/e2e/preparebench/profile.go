package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/fpga-dra/fpga-dra-driver/test/e2e/localcluster"
)

// profile takes a CPU profile of our daemon (d) for --profile-seconds
// while it alone prepares and unprepares, at each concurrency in turn,
// and writes it to --cpuprofile.
func profile(ctx context.Context, c *localcluster.Cluster, d *driver, o options, logf func(string, ...any)) error {
	logf("profiling %s for %ds", d.name, o.profileSeconds)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", d.pprof, o.profileSeconds)
	done := make(chan error, 1)
	go func() { done <- fetch(ctx, url, o.cpuProfile, time.Duration(o.profileSeconds+30)*time.Second) }()
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err == nil {
				logf("CPU profile in %s (go tool pprof -top %s)", o.cpuProfile, o.cpuProfile)
			}
			return err
		default:
		}
		n := o.concurrency[i%len(o.concurrency)]
		if _, err := measure(ctx, c, d, fmt.Sprintf("p%d-c%d", i, n), n, 4*n); err != nil {
			return err
		}
	}
}

// fetch writes what url answers to path.
func fetch(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
