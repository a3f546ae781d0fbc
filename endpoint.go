package amigo

import (
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// Endpoint addresses a context of a job: a rank and a context index within
// that rank. It is a plain value; any goroutine may make and use one.
type Endpoint struct {
	Rank    int
	Context int
}

// EndpointOf returns the endpoint of context 0 of rank.
func EndpointOf(rank int) Endpoint { return Endpoint{Rank: rank} }

func (e Endpoint) String() string { return fmt.Sprintf("rank %d context %d", e.Rank, e.Context) }

func (e Endpoint) addr() transport.Addr {
	return transport.Addr{Rank: int32(e.Rank), Context: int32(e.Context)}
}

func endpointOf(a transport.Addr) Endpoint {
	return Endpoint{Rank: int(a.Rank), Context: int(a.Context)}
}

// Dispatch identifies an active-message handler of a context.
type Dispatch uint16

// MaxDispatch bounds dispatch ids: valid ids are 0 to MaxDispatch-1.
const MaxDispatch = 1024

// Key names a registered memory region of one rank; the rank that owns the
// region hands it to the peers that may access it.
type Key uint64
