package amigo

import (
	"testing"
)

// The shm adapter's descriptor buffers: chosen by the adapter (0) unless
// the program or the environment set their size.
func TestShmRingSlots(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		env  map[string]string
		want int
	}{
		{"default", Config{}, nil, 0},
		{"RingSlots set", Config{RingSlots: 256}, nil, 256},
		{"AMIGO_RING_SLOTS", Config{}, map[string]string{"AMIGO_RING_SLOTS": "2048"}, 2048},
		{"Shm.RingSlots", Config{Shm: ShmConfig{RingSlots: 8192}}, nil, 8192},
		{"AMIGO_SHM_RING_SLOTS", Config{}, map[string]string{"AMIGO_SHM_RING_SLOTS": "4096"}, 4096},
		{"Shm.RingSlots below RingSlots", Config{RingSlots: 2048, Shm: ShmConfig{RingSlots: 512}}, nil, 2048},
	} {
		eff, err := c.cfg.resolve(func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := shmOptions(&eff).RingSlots; got != c.want {
			t.Errorf("%s: shm ring slots %d, want %d", c.name, got, c.want)
		}
		if got := shmOptions(&eff).MinRingSlots; got != eff.RingSlots {
			t.Errorf("%s: shm ring slots at least %d, want %d", c.name, got, eff.RingSlots)
		}
	}
	if _, err := (Config{Shm: ShmConfig{RingSlots: 3000}}).resolve(func(string) (string, bool) { return "", false }); err == nil {
		t.Error("3000 ring slots accepted")
	}
}
