package oci

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/credentials"
)

// fileCredentials serves credentials from a docker config.json file and
// reloads it when it changes (a mounted Secret is replaced in place), so a
// rotated password needs no restart.
type fileCredentials struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	lookup  auth.CredentialFunc
}

// newFileCredentials loads path, which must exist and parse.
func newFileCredentials(path string) (*fileCredentials, error) {
	f := &fileCredentials{path: path}
	if _, err := f.current(); err != nil {
		return nil, err
	}
	return f, nil
}

// get is an auth.CredentialFunc.
func (f *fileCredentials) get(ctx context.Context, hostport string) (auth.Credential, error) {
	lookup, err := f.current()
	if err != nil {
		return auth.EmptyCredential, err
	}
	return lookup(ctx, hostport)
}

// current returns the lookup of the file as it is now, loading it again
// when its size or modification time changed.
func (f *fileCredentials) current() (auth.CredentialFunc, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials file (--%s): %w", FlagRegistryConfig, err)
	}
	if f.lookup != nil && fi.ModTime().Equal(f.modTime) && fi.Size() == f.size {
		return f.lookup, nil
	}
	store, err := credentials.NewFileStore(f.path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials file %s (--%s): %w: it must be a docker config.json with an \"auths\" object", f.path, FlagRegistryConfig, err)
	}
	f.lookup, f.modTime, f.size = credentials.Credential(store), fi.ModTime(), fi.Size()
	return f.lookup, nil
}
