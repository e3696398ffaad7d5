// Package bitstream finds the file a config asks to load into a region:
// in the node's repository, or in a registry by OCI reference.
package bitstream

import (
	"context"
	"fmt"

	"github.com/fpga-dra/fpga-dra-driver/api/v1alpha1"
	"github.com/fpga-dra/fpga-dra-driver/pkg/discovery"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program"
	"github.com/fpga-dra/fpga-dra-driver/pkg/program/oci"
)

// Finder looks bitstreams up where the node keeps them.
type Finder struct {
	Repository *program.Repository
	// Registry fetches bitstreams a config names by OCI reference; nil
	// refuses such configs, saying RegistryUnavailable.
	Registry            *oci.Puller
	RegistryUnavailable string
}

// Find returns the file cfg asks for, for card's region, held for holder
// in the OCI cache when pulled. name is its path in the repository or its
// OCI reference (set as soon as known, also on failure), layer the cached
// OCI layer it came from.
func (f Finder) Find(ctx context.Context, holder string, cfg *v1alpha1.FpgaConfig, card *discovery.Card) (bs *program.Bitstream, name, layer string, err error) {
	// The interfaces a bitstream may be built for: the config's when it
	// names one (the prepare checked the region accepts it), else any the
	// region accepts.
	interfaces := card.Interfaces()
	if cfg.InterfaceID != "" {
		interfaces = []string{cfg.InterfaceID}
	}
	if cfg.BitstreamRef != "" {
		if f.Registry == nil {
			why := f.RegistryUnavailable
			if why == "" {
				why = "no bitstream cache is configured"
			}
			return nil, cfg.BitstreamRef, "", fmt.Errorf("%w: the config names %s in a registry, but this node pulls no bitstreams from registries: %s; fix that, or use a bitstream from the node's repository", program.ErrNotFound, cfg.BitstreamRef, why)
		}
		got, err := f.Registry.Fetch(ctx, cfg.BitstreamRef, oci.FetchOptions{
			Holder: holder, AFUID: cfg.AFUID, InterfaceIDs: interfaces, SHA256: cfg.SHA256,
		})
		if err != nil {
			return nil, cfg.BitstreamRef, "", err
		}
		return got.Bitstream, cfg.BitstreamRef, got.LayerDigest, nil
	}
	if f.Repository == nil {
		return nil, "", "", fmt.Errorf("%w: no bitstream repository is configured on this node", program.ErrNotFound)
	}
	if cfg.Bitstream == "" {
		bs, err = f.Repository.FindFor(interfaces, cfg.AFUID)
	} else {
		bs, err = f.byName(cfg, card)
	}
	if err != nil {
		return nil, "", "", err
	}
	return bs, bs.Path, "", nil
}

// byName finds the repository's file cfg names. Load checks the format
// against the card's family, then the interface: a file of the other
// family is a format mismatch.
func (f Finder) byName(cfg *v1alpha1.FpgaConfig, card *discovery.Card) (*program.Bitstream, error) {
	bs, err := f.Repository.FindByName(cfg.Bitstream, "")
	switch {
	case err != nil:
		return nil, err
	case bs.AFUID != cfg.AFUID:
		return nil, fmt.Errorf("%w: bitstream %s carries AFU %s, not the config's afuID %s", program.ErrInvalidBitstream, cfg.Bitstream, bs.AFUID, cfg.AFUID)
	case cfg.InterfaceID != "" && bs.InterfaceID != cfg.InterfaceID && card.Accepts(bs.InterfaceID):
		// A region that accepts several interfaces takes a file built
		// for another of them; the config's interfaceID says which. (A
		// file the region does not accept at all is Load's to refuse.)
		return nil, fmt.Errorf("%w: bitstream %s is built for interface %s, but the config asks for interface %s: name a build for %s or drop interfaceID from the config", program.ErrInterfaceMismatch, cfg.Bitstream, bs.InterfaceID, cfg.InterfaceID, cfg.InterfaceID)
	}
	return bs, nil
}
