package oci

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Flag names, shared by the node daemon and the admin CLI; errors name
// them as the fix.
const (
	FlagRegistryConfig     = "registry-config"
	FlagRegistryCAFile     = "registry-ca-file"
	FlagInsecureRegistries = "insecure-registries"
	FlagAllowedRegistries  = "allowed-registries"
	FlagCacheDir           = "bitstream-cache-dir"
	FlagCacheSize          = "bitstream-cache-size"
	FlagMaxLayerSize       = "bitstream-max-layer-size"
)

// EnvTwins are the environment variables a DaemonSet sets for the flags of
// PullerOptions.AddFlags.
var EnvTwins = map[string]string{
	FlagRegistryConfig:     "REGISTRY_CONFIG",
	FlagRegistryCAFile:     "REGISTRY_CA_FILE",
	FlagInsecureRegistries: "INSECURE_REGISTRIES",
	FlagAllowedRegistries:  "ALLOWED_REGISTRIES",
	FlagCacheDir:           "BITSTREAM_CACHE_DIR",
	FlagCacheSize:          "BITSTREAM_CACHE_SIZE",
	FlagMaxLayerSize:       "BITSTREAM_MAX_LAYER_SIZE",
}

// AddFlags registers the registry flags on fs.
func (o *RegistryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CredentialsFile, FlagRegistryConfig, o.CredentialsFile,
		"registry credentials in the docker config.json format (\"auths\"); empty: pull anonymously")
	fs.StringVar(&o.CAFile, FlagRegistryCAFile, o.CAFile,
		"PEM file of CA certificates trusted for registries' HTTPS, besides the system's")
	fs.StringSliceVar(&o.Insecure, FlagInsecureRegistries, o.Insecure,
		"registries (host or host:port, comma separated) reached over plain HTTP; every other registry is reached over HTTPS only")
	fs.StringSliceVar(&o.Allowed, FlagAllowedRegistries, o.Allowed,
		"registries (host or host:port, comma separated) claims may pull bitstreams from; empty: any registry a claim names")
}

// AddFlags registers the registry and cache flags on fs, defaulting what o
// leaves unset to DefaultCacheDir, DefaultCacheSize and DefaultMaxLayerSize.
func (o *PullerOptions) AddFlags(fs *pflag.FlagSet) {
	o.Registry.AddFlags(fs)
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MaxLayerSize == 0 {
		o.MaxLayerSize = DefaultMaxLayerSize
	}
	fs.StringVar(&o.CacheDir, FlagCacheDir, o.CacheDir,
		"directory of the content-addressed cache of bitstreams pulled from registries")
	fs.Var((*byteSize)(&o.CacheSize), FlagCacheSize,
		"most bytes of bitstreams the cache keeps (e.g. 4Gi); bitstreams prepared claims use are never evicted")
	fs.Var((*byteSize)(&o.MaxLayerSize), FlagMaxLayerSize,
		"largest bitstream pulled from a registry (e.g. 512Mi)")
}

// byteSize is a flag value of bytes written as a Kubernetes quantity
// (4Gi, 512Mi, 1000000).
type byteSize int64

func (b *byteSize) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteSize) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("%q is not a size: write bytes such as 4Gi or 512Mi", s)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return fmt.Errorf("%q is not a positive whole number of bytes: write a size such as 4Gi or 512Mi", s)
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) Type() string { return "bytes" }
