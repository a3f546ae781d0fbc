//go:build amd64 && !race

package order

import "sync/atomic"

const releaseStores = true

// storeRel64 is a plain MOVQ: on amd64 a release store.
//
//go:noescape
func storeRel64(p *atomic.Uint64, v uint64)

// storeRel32 is a plain MOVL.
//
//go:noescape
func storeRel32(p *atomic.Int32, v int32)
