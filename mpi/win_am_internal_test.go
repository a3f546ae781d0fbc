package mpi

import (
	"encoding/binary"
	"testing"
)

// The owner's decoding of an accumulate, fuzzed: whatever the header and
// data say, checkLayout and checkPlace refuse it or the update stays
// inside the window, and nothing panics.
func FuzzRMAHeader(f *testing.F) {
	seed := func(op opCode, k kind, flags byte, off uint64, blocks uint32, blockLen, stride uint64, n int) {
		h := make([]byte, rmaHdrLen)
		binary.LittleEndian.PutUint32(h[8:], blocks)
		h[12], h[13], h[14], h[15] = kindRMA, byte(op), byte(k), flags
		binary.LittleEndian.PutUint64(h[16:], off)
		binary.LittleEndian.PutUint32(h[24:], uint32(blockLen))
		binary.LittleEndian.PutUint32(h[28:], uint32(stride))
		f.Add(h, make([]byte, n))
	}
	seed(opSum, kInt64, 0, 0, 1, 64, 64, 64)
	seed(opSum, kInt32, rmaFetch, 8, 4, 8, 32, 32)
	seed(opNoOp, kFloat64, rmaFetch, 16, 2, 16, 48, 0)
	seed(opReplace, kUint8, 0, 3, 3, 1, 5, 3)
	seed(opMax, kFloat32, 0, 4, 1, 4, 4, 4)
	seed(opSum, kComplex128, rmaFetch, 0, 1, 32, 32, 32)
	seed(opProd, kInt16, 0, 254, 1, 2, 2, 2)
	w := &Win{}
	mem := make([]byte, 256)
	f.Fuzz(func(t *testing.T, h, data []byte) {
		if len(h) != rmaHdrLen {
			return
		}
		k, op, lay, at, fetch := parseRMA(h)
		if checkLayout(k, op, lay, len(data), fetch) != rmaOK {
			return
		}
		if at > uint64(len(mem)) {
			return // w.local refuses it
		}
		if checkPlace(mem, at, lay, k.size()) != rmaOK {
			return
		}
		span := lay.span()
		if at+span > uint64(len(mem)) {
			t.Fatalf("accepted %d bytes at %d of a %d-byte window", span, at, len(mem))
		}
		var old []byte
		if fetch {
			old = make([]byte, uint64(lay.blocks)*lay.blockLen)
		}
		in := data
		if op.code == opNoOp {
			in = nil
		}
		w.eachBlock(mem[at:at+span], lay, in, old, func(dst, s, o []byte) { w.applyBlock(k, op, dst, s, o) })
	})
}
