package mpi

import "context"

// The typed forms of the point-to-point operations: they view a slice of any
// numeric type as bytes (Bytes), without copying, and call the byte forms.

// Send sends buf to rank dest of c with tag; see Comm.Send.
func Send[T Numeric](ctx context.Context, c *Comm, buf []T, dest, tag int) error {
	return c.Send(ctx, Bytes(buf), dest, tag)
}

// Recv receives into buf from rank src of c with tag; see Comm.Recv. The
// status's Count is in bytes: Elements converts it.
func Recv[T Numeric](ctx context.Context, c *Comm, buf []T, src, tag int) (Status, error) {
	return c.Recv(ctx, Bytes(buf), src, tag)
}

// Isend starts sending buf to rank dest of c with tag; see Comm.Isend.
func Isend[T Numeric](c *Comm, buf []T, dest, tag int) (Request, error) {
	return c.Isend(Bytes(buf), dest, tag)
}

// Irecv starts receiving into buf from rank src of c with tag; see
// Comm.Irecv.
func Irecv[T Numeric](c *Comm, buf []T, src, tag int) (Request, error) {
	return c.Irecv(Bytes(buf), src, tag)
}

// Sendrecv sends sendbuf to dest and receives into recvbuf from src at once;
// see Comm.Sendrecv.
func Sendrecv[T Numeric](ctx context.Context, c *Comm, sendbuf []T, dest, sendtag int, recvbuf []T, src, recvtag int) (Status, error) {
	return c.Sendrecv(ctx, Bytes(sendbuf), dest, sendtag, Bytes(recvbuf), src, recvtag)
}
