//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// A port spins on its queues where a read of them looks at memory (shm),
// within spinBudget, and not where a read is a system call (tcp).
func TestSpinCalibrated(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			defer ads[0].Close()
			defer ads[1].Close()
			p, err := ads[0].Open(0, transport.NewDoorbell())
			if err != nil {
				t.Fatal(err)
			}
			spin := int(p.(*port).spin)
			t.Logf("%s: %d reads", prov, spin)
			if spin < 0 || spin > maxSpin {
				t.Fatalf("spin %d out of [0, %d]", spin, maxSpin)
			}
			if prov == "shm" && spin == 0 {
				t.Errorf("shm: no spin; a read of its queues costs more than %v", spinBudget)
			}
		})
	}
}
