package flagenv

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func flags() (*pflag.FlagSet, *bool, *time.Duration, *string) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	b := fs.Bool("programmable", true, "allow programming")
	d := fs.Duration("refresh-interval", 30*time.Second, "refresh")
	s := fs.String("root", "/", "root")
	Twins(fs, map[string]string{"programmable": "TEST_PROGRAMMABLE", "refresh-interval": "TEST_REFRESH", "root": "TEST_ROOT"})
	return fs, b, d, s
}

// TestApply: a set twin gives an unset flag its value, parsed as the flag
// parses it; the command line wins; an unset twin leaves the default.
func TestApply(t *testing.T) {
	t.Setenv("TEST_PROGRAMMABLE", "0")
	t.Setenv("TEST_REFRESH", "5s")
	fs, b, d, s := flags()
	if err := fs.Parse([]string{"--refresh-interval=1m"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs); err != nil {
		t.Fatal(err)
	}
	if *b || *d != time.Minute || *s != "/" {
		t.Errorf("programmable %v refresh %v root %q; want false (from $TEST_PROGRAMMABLE=0), 1m (command line), / (default)", *b, *d, *s)
	}
	if u := fs.Lookup("root").Usage; !strings.HasSuffix(u, " [$TEST_ROOT]") {
		t.Errorf("usage %q does not name the twin", u)
	}
}

// TestApplyBadValue: a twin the flag cannot parse is an error naming the
// variable, its value and the flag (the command then does not run).
func TestApplyBadValue(t *testing.T) {
	t.Setenv("TEST_PROGRAMMABLE", "yes please")
	fs, _, _, _ := flags()
	err := Apply(fs)
	if err == nil {
		t.Fatal("Apply accepted TEST_PROGRAMMABLE=\"yes please\"")
	}
	for _, want := range []string{"TEST_PROGRAMMABLE", `"yes please"`, "--programmable", "bool"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestTwinUnknownFlagPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Twin of a flag that does not exist did not panic")
		}
	}()
	Twin(pflag.NewFlagSet("test", pflag.ContinueOnError), "nope", "NOPE")
}
