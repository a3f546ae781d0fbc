//go:build !ofi

package main

import "github.com/amigo-hpc/amigo/transport/ofi"

// fabricReport says that this build has no libfabric adapter.
func fabricReport() fabric {
	return fabric{Note: ofi.ErrNotCompiled.Error()}
}
