package transport

import (
	"errors"
	"fmt"
	"slices"
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

// recMirror records what a Regions reports to a Mirror, recBatchMirror to
// a MirrorBatch.
type recMirror struct {
	calls []string
}

func (m *recMirror) Registered(index int, key Key, mem []byte, perm Perm) {}
func (m *recMirror) Deregistered(index int, key Key) {
	m.calls = append(m.calls, fmt.Sprintf("deregistered %#x", uint64(key)))
}

type recBatchMirror struct{ recMirror }

func (m *recBatchMirror) DeregisteredAll(keys []Key) {
	m.calls = append(m.calls, fmt.Sprintf("all %x", keys))
}

// DeregisterAll reports the live keys to a MirrorBatch in one call and to
// a plain Mirror one by one, skips and reports a key that names nothing,
// and leaves every region refused and its entry free.
func TestDeregisterAll(t *testing.T) {
	r := NewRegions()
	plain, batch := &recMirror{}, &recBatchMirror{}
	r.AddMirror(plain)
	r.AddMirror(batch)
	keys := make([]Key, 3)
	for i := range keys {
		k, err := r.Register(make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	gone, err := r.Register(make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Deregister(gone); err != nil {
		t.Fatal(err)
	}
	plain.calls, batch.calls = nil, nil

	list := []Key{keys[0], gone, keys[1], keys[2]}
	err = r.DeregisterAll(list)
	if !errors.Is(err, ErrBadKey) {
		t.Fatalf("DeregisterAll with a withdrawn key: %v, want ErrBadKey", err)
	}
	if want := []Key{keys[0], 0, keys[1], keys[2]}; !slices.Equal(list, want) {
		t.Fatalf("keys after DeregisterAll %x, want %x", list, want)
	}
	var wantPlain []string
	for _, k := range keys {
		wantPlain = append(wantPlain, fmt.Sprintf("deregistered %#x", uint64(k)))
	}
	wantBatch := []string{fmt.Sprintf("all %x", list)}
	if !slices.Equal(plain.calls, wantPlain) {
		t.Fatalf("plain mirror saw %q, want %q", plain.calls, wantPlain)
	}
	if !slices.Equal(batch.calls, wantBatch) {
		t.Fatalf("batch mirror saw %q, want %q", batch.calls, wantBatch)
	}
	for _, k := range keys {
		if _, _, err := r.Acquire(k, 0, 1); !errors.Is(err, ErrBadKey) {
			t.Fatalf("Acquire of deregistered key %#x: %v", uint64(k), err)
		}
		if err := r.Deregister(k); !errors.Is(err, ErrBadKey) {
			t.Fatalf("second Deregister of %#x: %v", uint64(k), err)
		}
	}
	// The three entries are free again: three registrations reuse them.
	idx := map[uint32]bool{}
	for _, k := range keys {
		idx[k.index()] = true
	}
	for range keys {
		k, err := r.Register(make([]byte, 64))
		if err != nil {
			t.Fatal(err)
		}
		if !idx[k.index()] {
			t.Fatalf("registration after DeregisterAll took entry %d, not one of those freed %v", k.index(), idx)
		}
		delete(idx, k.index())
	}
}
