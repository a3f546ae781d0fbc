package mpi

import (
	"math/bits"
	"unsafe"
)

// pool keeps byte buffers for reuse in power-of-two size classes from 64
// bytes up, each 8-byte aligned so that any element type can be viewed in
// it. It retains at most limit bytes; buffers beyond that, and requests
// beyond the largest class, are left to the garbage collector. The
// engine's lock guards it.
type pool struct {
	classes  [poolClasses][][]byte
	retained int
	limit    int
}

const (
	poolMinShift = 6
	poolClasses  = 26 // 64 B to 2 GiB
)

func poolClass(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - poolMinShift
	if c >= poolClasses {
		return -1
	}
	return c
}

// get returns a buffer of length n.
func (p *pool) get(n int) []byte {
	c := poolClass(n)
	if c < 0 {
		return alignedBytes(n)
	}
	if l := len(p.classes[c]); l > 0 {
		b := p.classes[c][l-1]
		p.classes[c][l-1] = nil
		p.classes[c] = p.classes[c][:l-1]
		p.retained -= cap(b)
		return b[:n]
	}
	return alignedBytes(1 << (c + poolMinShift))[:n]
}

// put gives b back for reuse.
func (p *pool) put(b []byte) {
	c := poolClass(cap(b))
	if c < 0 || cap(b) != 1<<(c+poolMinShift) || p.retained+cap(b) > p.limit {
		return
	}
	p.retained += cap(b)
	p.classes[c] = append(p.classes[c], b[:0])
}

func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:n]
}
