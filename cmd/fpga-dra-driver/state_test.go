package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fpga-dra/fpga-dra-driver/internal/drivermetrics"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
)

// TestProgrammerFlags: every programmer kind is named in the --programmer
// help of the daemon and of the program command, and the XRT flags reach
// the programmer: a value it refuses stops the daemon with the flag's
// name and the value.
func TestProgrammerFlags(t *testing.T) {
	for _, cmd := range []struct {
		name  string
		flags *pflag.FlagSet
	}{{"run", newRunCommand().Flags()}, {"program", newProgramCommand().Flags()}} {
		usage := cmd.flags.Lookup("programmer").Usage
		for _, kind := range program.ProgrammerKinds {
			if !strings.Contains(usage, kind) {
				t.Errorf("%s --programmer help %q does not name %s", cmd.name, usage, kind)
			}
		}
	}
	flags := newRunCommand().Flags()
	for name, def := range map[string]string{"xrt-tool-dir": program.DefaultXRTToolDir, "xrt-host-root": "", "xrt-timeout": program.DefaultXRTTimeout.String()} {
		if f := flags.Lookup(name); f == nil || f.DefValue != def {
			t.Errorf("--%s: %+v, want the default %q", name, f, def)
		}
	}

	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	base := func() runFlags {
		dir := t.TempDir()
		return runFlags{
			driverName: "fpga.dra.dev", root: dir, cdiDir: filepath.Join(dir, "cdi"), pluginDir: dir, programmer: program.KindAuto,
			xrtToolDir: program.DefaultXRTToolDir, xrtTimeout: time.Minute, prepareWait: time.Second,
		}
	}
	if _, err := newState(ctx, base(), fake.NewClientset(), drivermetrics.New()); err != nil {
		t.Fatalf("newState with the default XRT flags: %v", err)
	}
	for _, tc := range []struct {
		set  func(*runFlags)
		want string
	}{
		{func(f *runFlags) { f.xrtToolDir = "opt/xilinx/xrt/bin" }, `"opt/xilinx/xrt/bin"`},
		{func(f *runFlags) { f.xrtHostRoot = "host" }, `"host"`},
		{func(f *runFlags) { f.xrtTimeout = -time.Second }, "-1s"},
	} {
		f := base()
		tc.set(&f)
		_, err := newState(ctx, f, fake.NewClientset(), drivermetrics.New())
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--xrt-") {
			t.Errorf("newState with %+v: %v, want an error naming the XRT flags and %s", f, err, tc.want)
		}
	}
}
