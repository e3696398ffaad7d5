package draplugin_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery/simnode"
)

// scrape reads the metrics as Prometheus does.
func scrape(t *testing.T, m *drivermetrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func wantMetric(t *testing.T, text, line string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("metrics lack %q; have:\n%s", line, grepFPGA(text))
}

func grepFPGA(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "fpga_dra_") && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMetricsFollowPrepares(t *testing.T) {
	pn := startPreparingNode(t, preparingOptions{sim: simnode.Options{Cards: 2}})
	dra := pn.draClient(t)
	wantMetric(t, scrape(t, pn.metrics), `fpga_dra_devices{health="healthy"} 2`)

	ok := pn.claim(t, []string{dev0}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	if r := pn.prepare(t, dra, ok); r.Error != "" {
		t.Fatal(r.Error)
	}
	missing := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: "55555555555555555555555555555555"}))
	if r := pn.prepare(t, dra, missing); r.Error == "" {
		t.Fatal("prepare with a missing bitstream succeeded")
	}
	pn.unprepare(t, dra, missing)
	pn.sim.FailNext(errors.New("injected"))
	hw := pn.claim(t, []string{dev1}, fpgaConfig(t, v1alpha1.FpgaConfig{AFUID: NewAFU}))
	if r := pn.prepare(t, dra, hw); r.Error == "" {
		t.Fatal("prepare with a failing programmer succeeded")
	}
	pn.unprepare(t, dra, ok)

	text := scrape(t, pn.metrics)
	for _, line := range []string{
		`fpga_dra_prepare_total{outcome="success"} 1`,
		`fpga_dra_prepare_total{outcome="error"} 2`,
		`fpga_dra_prepares_in_flight 0`,
		`fpga_dra_unprepare_total{outcome="success"} 2`,
		`fpga_dra_programming_total{outcome="success"} 1`,
		`fpga_dra_programming_total{outcome="failure"} 2`,
		`fpga_dra_bitstream_verification_failures_total{reason="not_found"} 1`,
		`fpga_dra_prepare_duration_seconds_count{outcome="success"} 1`,
	} {
		wantMetric(t, text, line)
	}
}
