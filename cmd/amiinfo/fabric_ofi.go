//go:build ofi

package main

import "github.com/amigo-hpc/amigo/transport/ofi"

// fabricReport lists libfabric's providers on this machine.
func fabricReport() fabric {
	f := fabric{Compiled: true}
	provs, err := ofi.Providers()
	if err != nil {
		f.Note = err.Error()
		return f
	}
	for _, p := range provs {
		f.Providers = append(f.Providers, fabricProvider{
			Name: p.Name, Domain: p.Domain, Usable: p.Usable, Caps: p.Caps, MRMode: p.MRMode, Order: p.Order, Inject: p.Inject,
		})
	}
	if len(f.Providers) == 0 {
		f.Note = "libfabric lists no provider with reliable-datagram endpoints"
	}
	return f
}
