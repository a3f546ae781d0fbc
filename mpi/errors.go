package mpi

import (
	"errors"
	"fmt"
	"strings"

	"github.com/amigo-hpc/amigo"
)

// Errors reported by package mpi; test with errors.Is. Errors that come from
// the AMI (a peer that failed, a closed context) are passed on wrapped, so
// errors.Is also finds amigo's sentinels and errors.As its *amigo.PeerError.
var (
	// ErrTruncate reports a message longer than the receive buffer. The
	// buffer holds the message's first bytes, and nothing beyond it is
	// written; the sender's send completes without error.
	ErrTruncate = errors.New("mpi: message truncated: receive buffer too small")
	// ErrRank reports a rank outside the communicator.
	ErrRank = errors.New("mpi: rank out of range")
	// ErrTag reports a tag outside [0, TagUB], or AnyTag given to a send.
	ErrTag = errors.New("mpi: invalid tag")
	// ErrComm reports a nil or freed communicator, or an operation a
	// communicator does not allow.
	ErrComm = errors.New("mpi: invalid communicator")
	// ErrCount reports buffers whose lengths do not fit the operation's
	// counts.
	ErrCount = errors.New("mpi: invalid count or buffer length")
	// ErrOp reports a reduction operation that does not apply to the
	// element type.
	ErrOp = errors.New("mpi: invalid reduction operation")
	// ErrRequest reports a request handle that was already completed and
	// released by Wait or Test (a copy of a handle used twice).
	ErrRequest = errors.New("mpi: request already completed")
	// ErrCanceled reports a receive canceled before it matched a message.
	ErrCanceled = errors.New("mpi: request canceled")
	// ErrContextIDs reports that every communicator context id is in use.
	ErrContextIDs = errors.New("mpi: out of communicator context ids")
	// ErrClosed reports an mpi layer whose world was freed. It wraps
	// amigo.ErrClosed: a program that tests for the AMI's closed state
	// finds the layer's too.
	ErrClosed error = closedError{}
)

// closedError is ErrClosed: the layer's own message, amigo's sentinel
// underneath.
type closedError struct{}

func (closedError) Error() string { return "mpi: closed" }
func (closedError) Unwrap() error { return amigo.ErrClosed }

// TruncateError describes a truncated receive: Size is the message's length
// and Cap the receive buffer's, in bytes. It wraps ErrTruncate.
type TruncateError struct {
	Source, Tag int
	Size, Cap   int
}

func (e *TruncateError) Error() string {
	return fmt.Sprintf("mpi: message of %d bytes from rank %d tag %d truncated to a receive buffer of %d", e.Size, e.Source, e.Tag, e.Cap)
}

func (e *TruncateError) Unwrap() error { return ErrTruncate }

// errorf is fmt.Errorf for the layer's own messages, which start with
// "mpi: ": the prefix stands once at the front however many of the
// layer's errors the message wraps (each of which starts with it too), as
// every package of amigo names itself once ("amigo: ", "mpi: ", "tcp: ").
// The error wraps what fmt.Errorf's would.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	msg := err.Error()
	if strings.Count(msg, prefix) <= 1 {
		return err
	}
	return &layerError{msg: prefix + strings.ReplaceAll(strings.TrimPrefix(msg, prefix), prefix, ""), err: err}
}

const prefix = "mpi: "

// layerError is an error of errorf whose message was tidied.
type layerError struct {
	msg string
	err error
}

func (e *layerError) Error() string { return e.msg }
func (e *layerError) Unwrap() error { return e.err }
