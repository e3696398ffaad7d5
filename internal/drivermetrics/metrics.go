// Package drivermetrics holds the node daemon's Prometheus metrics: claim
// preparation, programming, bitstream verification and device health. Each
// Metrics has its own registry, so several drivers (tests) never collide.
// A nil *Metrics records nothing.
package drivermetrics

import (
	"errors"
	"net/http"
	"time"

	"k8s.io/component-base/metrics"

	"github.com/fpga-dra/fpga-dra-driver/internal/metricsserver"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

const namespace = "fpga_dra"

// Outcomes of a prepare or unprepare call for one claim.
const (
	OutcomeSuccess    = "success"
	OutcomeError      = "error"
	OutcomeInProgress = "in_progress"
)

// Metrics is the set of the daemon's metrics.
type Metrics struct {
	registry metrics.KubeRegistry

	prepareTotal        *metrics.CounterVec
	prepareDuration     *metrics.HistogramVec
	unprepareTotal      *metrics.CounterVec
	unprepareDuration   *metrics.HistogramVec
	inFlight            *metrics.Gauge
	programmingTotal    *metrics.CounterVec
	programmingDuration *metrics.HistogramVec
	verifyFailures      *metrics.CounterVec
	devices             *metrics.GaugeVec
}

// New creates and registers the metrics.
func New() *Metrics {
	m := &Metrics{
		registry: metrics.NewKubeRegistry(),
		prepareTotal: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "prepare_total",
			Help: "ResourceClaim preparations by outcome (success, error, in_progress).", StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		prepareDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: namespace, Name: "prepare_duration_seconds",
			Help:    "Time to prepare one ResourceClaim, by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 45}, StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		unprepareTotal: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "unprepare_total",
			Help: "ResourceClaim unpreparations by outcome (success, error).", StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		unprepareDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: namespace, Name: "unprepare_duration_seconds",
			Help:    "Time to unprepare one ResourceClaim, by outcome.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}, StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		inFlight: metrics.NewGauge(&metrics.GaugeOpts{
			Namespace: namespace, Name: "prepares_in_flight",
			Help: "ResourceClaim preparations currently running.", StabilityLevel: metrics.ALPHA,
		}),
		programmingTotal: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "programming_total",
			Help: "Partial reconfigurations by outcome (success, failure).", StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		programmingDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: namespace, Name: "programming_duration_seconds",
			Help:    "Time from finding the bitstream to a verified AFU ID, by outcome.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 20, 45, 90}, StabilityLevel: metrics.ALPHA,
		}, []string{"outcome"}),
		verifyFailures: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: namespace, Name: "bitstream_verification_failures_total",
			Help: "Bitstreams refused before or after programming, by reason (not_found, invalid, checksum_mismatch, interface_mismatch, changed, afu_mismatch).", StabilityLevel: metrics.ALPHA,
		}, []string{"reason"}),
		devices: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Namespace: namespace, Name: "devices",
			Help: "Published devices by health (healthy, unhealthy).", StabilityLevel: metrics.ALPHA,
		}, []string{"health"}),
	}
	m.registry.MustRegister(m.prepareTotal, m.prepareDuration, m.unprepareTotal, m.unprepareDuration, m.inFlight,
		m.programmingTotal, m.programmingDuration, m.verifyFailures, m.devices)
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return metricsserver.Handler(m.registry)
}

// Registry is the gatherer behind Handler (tests read it).
func (m *Metrics) Registry() metrics.KubeRegistry { return m.registry }

// StartPrepare counts a prepare in flight; call the returned function with
// the outcome when it ends.
func (m *Metrics) StartPrepare() func(outcome string) {
	if m == nil {
		return func(string) {}
	}
	start := time.Now()
	m.inFlight.Inc()
	return func(outcome string) {
		m.inFlight.Dec()
		m.prepareTotal.WithLabelValues(outcome).Inc()
		m.prepareDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
	}
}

// ObserveUnprepare records one unprepare.
func (m *Metrics) ObserveUnprepare(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.unprepareTotal.WithLabelValues(outcome).Inc()
	m.unprepareDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// ObserveProgramming records one programming job. A failure caused by the
// bitstream also counts as a verification failure with its reason.
func (m *Metrics) ObserveProgramming(err error, d time.Duration) {
	if m == nil {
		return
	}
	outcome := "success"
	if err != nil {
		outcome = "failure"
		if reason := VerificationReason(err); reason != "" {
			m.verifyFailures.WithLabelValues(reason).Inc()
		}
	}
	m.programmingTotal.WithLabelValues(outcome).Inc()
	m.programmingDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

// SetDevices records how many published devices are healthy and unhealthy.
func (m *Metrics) SetDevices(healthy, unhealthy int) {
	if m == nil {
		return
	}
	m.devices.WithLabelValues("healthy").Set(float64(healthy))
	m.devices.WithLabelValues("unhealthy").Set(float64(unhealthy))
}

// VerificationReason classifies an error caused by a bitstream; "" when
// the bitstream is not to blame (e.g. a hardware programming error).
func VerificationReason(err error) string {
	switch {
	case errors.Is(err, program.ErrNotFound):
		return "not_found"
	case errors.Is(err, program.ErrChecksumMismatch):
		return "checksum_mismatch"
	case errors.Is(err, program.ErrInterfaceMismatch):
		return "interface_mismatch"
	case errors.Is(err, program.ErrBitstreamChanged):
		return "changed"
	case errors.Is(err, program.ErrVerifyFailed):
		return "afu_mismatch"
	case errors.Is(err, program.ErrInvalidBitstream):
		return "invalid"
	}
	return ""
}
