//go:build !amd64

package memcopy

// HaveMovsb reports whether the string move is one of the ways: only on
// amd64.
var HaveMovsb = false

// Move copies min(len(dst), len(src)) bytes of src into dst: Go's copy,
// whatever w says (there is no other way here).
func Move(dst, src []byte, w Way) { copy(dst, src) }

// now stands for a clock: with no way to choose between, nothing is
// timed.
func now() uint64 { return 1 }
