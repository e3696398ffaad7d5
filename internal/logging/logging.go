// Package logging is the logging set-up of both binaries: the verbosity
// and format flags of k8s.io/component-base (-v, --vmodule,
// --logging-format text or json, ...) applied to klog.
package logging

import (
	"github.com/spf13/pflag"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// Config is the logging configuration its flags set.
type Config struct {
	config *logsapi.LoggingConfiguration
	gates  featuregate.MutableFeatureGate
}

// New returns the default configuration: text, verbosity 0.
func New() *Config {
	gates := featuregate.NewFeatureGate()
	utilruntime.Must(logsapi.AddFeatureGates(gates))
	return &Config{config: logsapi.NewLoggingConfiguration(), gates: gates}
}

// AddFlags registers the logging flags on fs.
func (c *Config) AddFlags(fs *pflag.FlagSet) { logsapi.AddFlags(c.config, fs) }

// Apply validates the configuration and sets klog up with it. A process
// applies one configuration: applying the same one again (a command run
// twice in one test binary) does nothing, another one fails.
func (c *Config) Apply() error {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	return logsapi.ValidateAndApply(c.config, c.gates)
}
