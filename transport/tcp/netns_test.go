package tcp_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/amigo-hpc/amigo/internal/hostmesh"
	"github.com/amigo-hpc/amigo/internal/netns"
)

// Three hosts (network namespaces), each pair joined by a veth pair of its
// own with private addresses, run a job of six ranks (two per host) started
// by amirun --hosts; every rank exchanges with every other over TCP, and
// the interface counters of every link show the traffic between its two
// hosts crossed it.
//
// With AMIGO_TRANSPORT=auto, ranks of one host use shared memory and only
// ranks of different hosts TCP; the links carry the same.
func TestHostsMesh(t *testing.T) {
	if why := netns.Available(); why != "" {
		t.Fatal(why)
	}
	spec := "mesh:" + strconv.Itoa(hostmesh.Size)
	t.Run("tcp", func(t *testing.T) {
		hostmesh.Run(t, os.Args[0], rankEnv, spec, "[loop tcp]", "AMIGO_TRANSPORT=tcp", "AMIGO_TCP_STATS=1")
	})
	t.Run("auto", func(t *testing.T) {
		hostmesh.Run(t, os.Args[0], rankEnv, spec, "[loop shm tcp]", "AMIGO_TRANSPORT=auto", "AMIGO_TCP_STATS=1")
	})
}
