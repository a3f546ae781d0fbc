//go:build !amd64 || race

package order

import "sync/atomic"

const releaseStores = false

func storeRel64(p *atomic.Uint64, v uint64) { p.Store(v) }

func storeRel32(p *atomic.Int32, v int32) { p.Store(v) }
