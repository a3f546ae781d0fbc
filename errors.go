package amigo

import (
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// Errors reported by amigo. Errors that involve a peer come wrapped in a
// *PeerError naming it; test with errors.Is.
//
// Every package of the module names itself at the front of the errors it
// makes, once ("amigo: ", "mpi: ", "tcp: ", "shm: ", "ofi: "), and wraps
// what went wrong underneath with %w, so a message reads from the call
// that failed down to the cause ("mpi: Recv from rank 1 tag 3: amigo: rank
// 1 context 0: closed"). Sentinel values meant for errors.Is carry no
// prefix of their own where a wrapper adds it, and package mpi's wrappers
// keep its prefix to the front when they wrap its own errors.
var (
	// ErrClosed reports a client or context that was closed, or a peer that
	// closed before an operation with it completed.
	ErrClosed = transport.ErrClosed
	// ErrUnknownEndpoint reports an endpoint outside the job.
	ErrUnknownEndpoint = errors.New("unknown endpoint")
	// ErrBadDispatch reports a dispatch id outside [0, MaxDispatch).
	ErrBadDispatch = errors.New("dispatch id out of range")
	// ErrNoDispatch reports that the receiver has no handler for the
	// dispatch id of a message.
	ErrNoDispatch = errors.New("no handler registered for dispatch id")
	// ErrDeclined reports that the receiver's handler named no buffer for a
	// message it could not take inline.
	ErrDeclined = errors.New("receiver declined the message")
	// ErrTooSmall reports a receive buffer smaller than the message.
	ErrTooSmall = errors.New("receive buffer smaller than the message")
	// ErrTooLarge reports a header, immediate message or buffer beyond a limit.
	ErrTooLarge = errors.New("too large")
	// ErrNilBuffer reports a nil or empty buffer where data is required.
	ErrNilBuffer = transport.ErrNilBuffer
	// ErrBadLayout reports a strided layout with no blocks, blocks that
	// overlap, or more blocks than the local buffer holds.
	ErrBadLayout = errors.New("bad data layout")
	// ErrBadKey reports a memory region key that names no registered region.
	ErrBadKey = transport.ErrBadKey
	// ErrBounds reports a GET or PUT outside its memory region.
	ErrBounds = transport.ErrBounds
	// ErrPermission reports an access the region's registration does not
	// permit (RegisterMemoryPerm).
	ErrPermission = transport.ErrPermission
	// ErrMisaligned reports a remote atomic on a word whose offset is not
	// a multiple of its size.
	ErrMisaligned = transport.ErrMisaligned
	// ErrBadAtomic reports a remote atomic operation or type that does
	// not exist, or an operation its type does not have.
	ErrBadAtomic = transport.ErrBadAtomic
	// ErrRemoteIO reports that the receiver could not fetch a message's data.
	ErrRemoteIO = errors.New("receiver could not fetch the data")
	// ErrCorrupt reports a peer that sent something no correct peer sends.
	ErrCorrupt = transport.ErrCorrupt
	// ErrStale reports a handle to an operation that already completed.
	ErrStale = errors.New("stale handle")
	// ErrBusy reports a context used from two goroutines at once.
	ErrBusy = errors.New("context in use by another goroutine")
)

// PeerError reports an operation that failed because of the peer at Addr.
type PeerError = transport.PeerError

// AccessError describes a refused access to registered memory.
type AccessError = transport.AccessError

func peerErr(ep Endpoint, err error) error {
	return &PeerError{Addr: ep.addr(), Err: err}
}

// statusErr maps the status of an ACK to an error.
func statusErr(ep Endpoint, s uint32) error {
	var err error
	switch s {
	case wire.StatusOK:
		return nil
	case wire.StatusNoDispatch:
		err = ErrNoDispatch
	case wire.StatusDeclined:
		err = ErrDeclined
	case wire.StatusTooSmall:
		err = ErrTooSmall
	case wire.StatusRemoteIO:
		err = ErrRemoteIO
	case wire.StatusClosed:
		err = ErrClosed
	default:
		err = fmt.Errorf("status %d", s)
	}
	return peerErr(ep, err)
}
