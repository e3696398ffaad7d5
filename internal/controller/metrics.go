package controller

import (
	"time"

	"k8s.io/component-base/metrics"
)

// Metrics are the controller's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	reconcileTotal    *metrics.CounterVec
	reconcileDuration *metrics.HistogramVec
}

// NewMetrics creates the metrics; register them with Register.
func NewMetrics() *Metrics {
	return &Metrics{
		reconcileTotal: metrics.NewCounterVec(&metrics.CounterOpts{
			Namespace: "fpga_dra", Subsystem: "controller", Name: "reconcile_total",
			Help:           "Reconciliations of AcceleratorFunctions and FpgaRegions, by kind and result (success, error).",
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind", "result"}),
		reconcileDuration: metrics.NewHistogramVec(&metrics.HistogramOpts{
			Namespace: "fpga_dra", Subsystem: "controller", Name: "reconcile_duration_seconds",
			Help:           "Time to reconcile one AcceleratorFunction or FpgaRegion, by kind.",
			Buckets:        []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
			StabilityLevel: metrics.ALPHA,
		}, []string{"kind"}),
	}
}

// Register registers the metrics with register, e.g.
// legacyregistry.MustRegister or a KubeRegistry's MustRegister.
func (m *Metrics) Register(register func(...metrics.Registerable)) {
	register(m.reconcileTotal, m.reconcileDuration)
}

// observe records one reconciliation.
func (m *Metrics) observe(kind string, start time.Time, err error) {
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.reconcileTotal.WithLabelValues(kind, result).Inc()
	m.reconcileDuration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
}
