package transport

import (
	"errors"
	"testing"
)

// The table grows by doubling and reuses the entries of deregistered
// regions: live keys resolve to their memory, dead ones are refused, and
// indices stay as low as the peak of live registrations allows (a mirror
// of the table in a peer's reach covers the low indices only).
func TestRegionsGrowAndReuse(t *testing.T) {
	r := NewRegions()
	mems := make([][]byte, 300)
	keys := make([]Key, len(mems))
	for i := range mems {
		mems[i] = []byte{byte(i), byte(i >> 8), 7}
		k, err := r.Register(mems[i])
		if err != nil {
			t.Fatal(err)
		}
		if int(k.index()) != i {
			t.Fatalf("registration %d at index %d", i, k.index())
		}
		keys[i] = k
	}
	for i, k := range keys {
		mem, acc, err := r.Acquire(k, 1, 2)
		if err != nil || &mem[0] != &mems[i][1] {
			t.Fatalf("key %d: %v", i, err)
		}
		acc.Release()
	}
	tabLen := len(*r.tab.Load())
	for i := 0; i < len(keys); i += 2 {
		if err := r.Deregister(keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(keys); i += 2 {
		if _, _, err := r.Acquire(keys[i], 0, 1); !errors.Is(err, ErrBadKey) {
			t.Fatalf("dead key %d: %v", i, err)
		}
		k, err := r.Register(mems[i])
		if err != nil {
			t.Fatal(err)
		}
		if int(k.index()) >= len(keys) || k == keys[i] {
			t.Fatalf("re-registration %d: index %d, key reused %v", i, k.index(), k == keys[i])
		}
		keys[i] = k
	}
	if n := len(*r.tab.Load()); n != tabLen {
		t.Fatalf("table grew from %d to %d entries with no new peak", tabLen, n)
	}
	for i, k := range keys {
		if n, err := r.Len(k); err != nil || n != 3 {
			t.Fatalf("key %d: len %d, %v", i, n, err)
		}
	}
}
