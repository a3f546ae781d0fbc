//go:build ofi

package amigo_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/amigo-hpc/amigo/internal/hostmesh"
	"github.com/amigo-hpc/amigo/internal/netns"
)

// Six ranks on three hosts (network namespaces joined by veth pairs) over
// libfabric's tcp;ofi_rxm provider: every rank exchanges small messages and
// a large one (fetched by fi_read) with every other, and the links between
// the hosts carry the traffic. With AMIGO_TRANSPORT=auto the ranks of one
// host use shared memory and the others still reach each other through
// the adapter auto picks between hosts.
func TestHostsMeshOFI(t *testing.T) {
	if why := netns.Available(); why != "" {
		t.Fatal(why)
	}
	spec := "mesh:" + strconv.Itoa(hostmesh.Size)
	hostmesh.Run(t, os.Args[0], rankEnv, spec, "[loop ofi]", "AMIGO_TRANSPORT=ofi", "AMIGO_OFI_PROVIDER=tcp;ofi_rxm")
}
