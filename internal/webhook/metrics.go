package webhook

import (
	"time"

	"k8s.io/component-base/metrics"
)

// Metrics are the webhook's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	requests *metrics.CounterVec
	duration *metrics.HistogramVec
}

// NewMetrics creates the metrics; register them with Register.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "fpga_dra", Subsystem: "webhook", Name: "admission_requests_total",
			Help:           "Admission reviews by resource and verdict (allowed, denied).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"resource", "verdict"}),
		duration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "fpga_dra", Subsystem: "webhook", Name: "admission_duration_seconds",
			Help:           "Time to review one admission request, by resource.",
			Buckets:        []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
			StabilityLevel: metrics.ALPHA,
		}, []string{"resource"}),
	}
}

// Register registers the metrics with register, e.g.
// legacyregistry.MustRegister or a KubeRegistry's MustRegister.
func (m *Metrics) Register(register func(...metrics.Registerable)) {
	register(m.requests, m.duration)
}

func (m *Metrics) observe(resource string, allowed bool, start time.Time) {
	if m == nil {
		return
	}
	verdict := "allowed"
	if !allowed {
		verdict = "denied"
	}
	m.requests.WithLabelValues(resource, verdict).Inc()
	m.duration.WithLabelValues(resource).Observe(time.Since(start).Seconds())
}
