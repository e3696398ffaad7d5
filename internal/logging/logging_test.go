package logging

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// TestApply: the flags choose the format and verbosity; the same
// configuration applies twice, another one is refused.
func TestApply(t *testing.T) {
	parse := func(args ...string) *Config {
		t.Helper()
		c := New()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		c.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := parse("--logging-format=json", "-v=3").Apply(); err != nil {
		t.Fatalf("json at -v=3: %v", err)
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Errorf("verbosity after -v=3: V(3) %v, V(4) %v, want true, false", klog.V(3).Enabled(), klog.V(4).Enabled())
	}
	if err := parse("--logging-format=json", "-v=3").Apply(); err != nil {
		t.Errorf("the same configuration again: %v", err)
	}
	if err := parse("--logging-format=text").Apply(); err == nil {
		t.Error("another configuration applied after the first")
	}
	if err := parse("--logging-format=xml").Apply(); err == nil {
		t.Error("--logging-format=xml accepted")
	}
}
