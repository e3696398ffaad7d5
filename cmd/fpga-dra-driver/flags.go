package main

import (
	"flag"

	"k8s.io/klog/v2"
)

// goflagSet returns klog's flags (-v, --vmodule, ...) for the daemon.
func goflagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs
}
