// Package flagenv gives command-line flags environment-variable twins, for
// DaemonSet and Deployment manifests. A flag set on the command line wins;
// otherwise a set twin gives the flag its value, parsed as the command line
// would parse it; otherwise the flag keeps its default.
package flagenv

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

// annotation holds a flag's twin among its pflag annotations.
const annotation = "flagenv.twin"

// Twin gives the flag name of fs the environment variable env and appends
// " [$env]" to its usage. It panics when fs has no such flag: a
// programming error.
func Twin(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("flagenv: no flag --%s", name))
	}
	if err := fs.SetAnnotation(name, annotation, []string{env}); err != nil {
		panic(err)
	}
	f.Usage += " [$" + env + "]"
}

// Apply sets every flag of fs that has a twin, was not set on the command
// line and whose twin is set, from its twin. A value the flag cannot parse
// is an error that names the variable, the value and the flag.
func Apply(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		twin := f.Annotations[annotation]
		if err != nil || f.Changed || len(twin) != 1 {
			return
		}
		v, ok := os.LookupEnv(twin[0])
		if !ok {
			return
		}
		if serr := f.Value.Set(v); serr != nil {
			err = fmt.Errorf("environment variable %s=%q for --%s: %w (unset it or give a valid %s)", twin[0], v, f.Name, serr, f.Value.Type())
		}
	})
	return err
}

// Twins gives each flag of fs named in twins the environment variable it
// maps to (see Twin).
func Twins(fs *pflag.FlagSet, twins map[string]string) {
	for name, env := range twins {
		Twin(fs, name, env)
	}
}
