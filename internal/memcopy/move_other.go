//go:build !amd64

package memcopy

// HaveMovsb reports whether the string move has its fast form here: only
// on amd64.
var HaveMovsb = false

// Move copies min(len(dst), len(src)) bytes of src into dst with Go's
// copy, whatever movsb says (there is no string move here).
func Move(dst, src []byte, movsb bool) { copy(dst, src) }

// MoveAhead copies min(len(dst), len(src)) bytes of src into dst with Go's
// copy: nothing is prefetched here.
func MoveAhead(dst, src []byte, ahead int) { copy(dst, src) }
