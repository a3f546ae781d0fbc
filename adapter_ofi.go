//go:build ofi

package amigo

import (
	"context"
	"strings"
	"sync"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/ofi"
)

func init() {
	// Between shared memory and TCP: a fabric, when there is one, carries
	// what leaves the host.
	registerProcessAdapter(processAdapter{name: "ofi", prefer: 15, open: openOFI})
}

// plainProviders are those auto does not pick: TCP, which the TCP adapter
// serves as well, and shared memory, which the shm adapter serves.
var plainProviders = []string{"tcp", "tcp;ofi_rxm", "sockets", "udp", "udp;ofi_rxd", "shm", "net", "net;ofi_rxm"}

// autoProvider returns the first usable provider that is a fabric, or "";
// it asks libfabric once per process.
var autoProvider = sync.OnceValue(func() string {
	provs, err := ofi.Providers()
	if err != nil {
		return ""
	}
	for _, p := range provs {
		plain := strings.HasPrefix(p.Name, "ofi_hook") || strings.HasPrefix(p.Name, "ofi_mrail")
		for _, q := range plainProviders {
			plain = plain || p.Name == q
		}
		if p.Usable && !plain {
			return p.Name
		}
	}
	return ""
})

// openOFI makes this rank's libfabric adapter and publishes its endpoints;
// with auto, only when the machine has a fabric's provider (or the program
// named one).
func openOFI(ctx context.Context, job transport.Bootstrap, regions *transport.Regions, cfg *Config) (transport.Adapter, error) {
	if job.Size() < 2 {
		return nil, nil
	}
	prov := cfg.OFI.Provider
	if prov == "" {
		if cfg.Transport == "ofi" {
			prov = ofi.DefaultProvider
		} else if prov = autoProvider(); prov == "" {
			return nil, nil
		}
	}
	a, err := ofi.New(job, regions, ofi.Options{
		Provider:  prov,
		Addr:      cfg.OFI.Addr,
		Contexts:  cfg.Contexts,
		RingSlots: cfg.RingSlots,
		RDMASlots: cfg.RDMASlots,
		Timeout:   cfg.OFI.Timeout,
		CgoCalls:  cfg.OFI.CgoCalls,
	})
	if err != nil {
		return nil, err
	}
	// Over ofi_rxm the adapter's links have smaller descriptor buffers
	// than Config.RingSlots (their largest packet within rxm's eager
	// limit): an inline Send must fit half of one, or its descriptor is
	// one the link's reader refuses as corrupt (8 KiB over tcp;ofi_rxm
	// with the defaults); so must a multicast's request (packetMax).
	// Every rank computes the same.
	cfg.linkSlots = a.RingSlots()
	if most := cfg.packetMax() - wire.AMSize(0, 0, true); cfg.InlineMax > most {
		cfg.InlineMax = most
	}
	return a, nil
}
