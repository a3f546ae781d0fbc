package mpi

import (
	"fmt"

	"github.com/amigo-hpc/amigo"
)

// Strided target layouts: a Put, Get or accumulate whose origin elements
// are contiguous and whose target elements are a vector, Count blocks of
// BlockLen elements whose starts are Stride elements apart (MPI_Put with a
// target datatype of MPI_Type_vector): a column of a row-major matrix, a
// face of a halo. Puts and Gets travel as the AMI's strided RDMA, one
// piece per block and no packing; accumulates as one message the owner
// applies block by block (win_am.go).

// Vector is a strided layout of elements (MPI_Type_vector): Count blocks
// of BlockLen elements, block i starting i*Stride elements after block 0.
// Stride is at least BlockLen: blocks neither overlap nor go backwards.
type Vector struct {
	Count, BlockLen, Stride int
}

// layout returns v in bytes of es-byte elements, checking it against an
// origin of n elements.
func (v Vector) layout(es, n int) (layout, error) {
	if v.Count < 0 || v.BlockLen < 0 || v.Stride < v.BlockLen {
		return layout{}, fmt.Errorf("%w: vector of %d blocks of %d elements, stride %d: want counts of at least 0 and a stride of at least a block", ErrCount, v.Count, v.BlockLen, v.Stride)
	}
	const most = 1 << 40
	if v.Count > most || v.Stride > most/max(es, 1) || (v.Count > 0 && v.Stride > 0 && v.Count > most/v.Stride) {
		return layout{}, fmt.Errorf("%w: vector of %d blocks, stride %d: too large", ErrCount, v.Count, v.Stride)
	}
	if v.Count*v.BlockLen != n {
		return layout{}, fmt.Errorf("%w: %d origin elements for a vector of %d blocks of %d", ErrCount, n, v.Count, v.BlockLen)
	}
	return layout{blocks: v.Count, blockLen: uint64(v.BlockLen * es), stride: uint64(v.Stride * es)}, nil
}

// PutVector copies origin's elements into the blocks of v in rank target's
// window, from displacement disp (MPI_Put with a vector target type).
func PutVector[T Numeric](w *Win, origin []T, target, disp int, v Vector) error {
	return w.rmaVector(true, kindOf[T]().size(), Bytes(origin), target, disp, v)
}

// GetVector copies the blocks of v in rank target's window, from
// displacement disp, into origin, one after the other (MPI_Get with a
// vector target type).
func GetVector[T Numeric](w *Win, origin []T, target, disp int, v Vector) error {
	return w.rmaVector(false, kindOf[T]().size(), Bytes(origin), target, disp, v)
}

func (w *Win) rmaVector(put bool, es int, origin []byte, target, disp int, v Vector) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	if es == 0 {
		return fmt.Errorf("%w: unsupported element type", ErrOp)
	}
	lay, err := v.layout(es, len(origin)/es)
	if err != nil {
		return err
	}
	if lay.blocks <= 1 || lay.blockLen == lay.stride {
		return w.rma(put, origin, target, disp, nil)
	}
	w.comm.e.lock()
	defer w.comm.e.unlock()
	if lay.blockLen == 0 {
		_, err := w.target(target, disp, 0)
		return err
	}
	pl, err := w.target(target, disp, int(lay.span()))
	if err != nil {
		return err
	}
	s := amigo.Strided{Count: lay.blocks, Block: int(lay.blockLen), LocalStride: int(lay.blockLen), RemoteStride: int(lay.stride)}
	w.pending++
	if put {
		w.put[target] = true
		err = w.ac.PutStrided(w.eps[target], origin, s, pl.key, pl.off, w.done)
	} else {
		err = w.ac.GetStrided(w.eps[target], origin, s, pl.key, pl.off, w.done)
	}
	if err != nil {
		w.pending--
		return errorf("mpi: strided RMA with rank %d: %w", target, err)
	}
	return nil
}

// AccumulateVector is Accumulate into the blocks of v in rank target's
// window, from displacement disp (MPI_Accumulate with a vector target
// type): origin's elements update them one after the other, each update
// atomic.
func AccumulateVector[T Numeric](w *Win, origin []T, target, disp int, v Vector, op Op) error {
	return accumulateVector(w, kindOf[T](), Bytes(origin), nil, target, disp, v, op)
}

// GetAccumulateVector is GetAccumulate into the blocks of v (MPI_Get_accumulate
// with a vector target type): result receives the old elements.
func GetAccumulateVector[T Numeric](w *Win, origin, result []T, target, disp int, v Vector, op Op) error {
	if len(result) != len(origin) && op.code != opNoOp {
		return fmt.Errorf("%w: GetAccumulate of %d elements into a result of %d", ErrCount, len(origin), len(result))
	}
	if result == nil {
		result = []T{}
	}
	return accumulateVector(w, kindOf[T](), Bytes(origin), Bytes(result), target, disp, v, op)
}

func accumulateVector(w *Win, k kind, origin, result []byte, target, disp int, v Vector, op Op) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	es := k.size()
	if es == 0 {
		return fmt.Errorf("%w: unsupported element type", ErrOp)
	}
	n := len(origin)
	if op.code == opNoOp {
		n = len(result)
	}
	lay, err := v.layout(es, n/es)
	if err != nil {
		return err
	}
	w.comm.e.lock()
	defer w.comm.e.unlock()
	_, err = w.accumulateLayout(k, origin, result, nil, target, disp, op, lay, nil)
	return err
}
