package mpi

import "context"

// Nonblocking collectives on intercommunicators. Each runs its blocking
// form on a goroutine of its own and returns a Request that completes
// with it. The goroutines of one intercommunicator run one after the
// other, in the order the program started them, and a blocking collective
// called meanwhile waits for them first (next): every rank then runs the
// collectives in the order it called them, as MPI requires of the
// program, whatever the scheduling. The buffers belong to the collective
// until the request completes.

// nbTurn marks the context of a nonblocking collective's goroutine: its
// turn has come, next does not wait.
type nbTurn struct{}

// start runs fn on a goroutine after the nonblocking collectives started
// on ic before it, and returns the request that completes with it.
func (ic *Intercomm) start(fn func(ctx context.Context) error) (Request, error) {
	if err := ic.check(); err != nil {
		return Request{}, err
	}
	e := ic.x.e
	e.lock()
	r := e.allocReq(reqInter)
	q := Request{r: r, gen: r.gen}
	prev, done := ic.nbTail, make(chan struct{})
	ic.nbTail = done
	e.unlock()
	go func() {
		if prev != nil {
			<-prev
		}
		err := fn(context.WithValue(context.Background(), nbTurn{}, true))
		e.lock()
		if ic.nbTail == done {
			ic.nbTail = nil
		}
		if r.gen == q.gen {
			e.complete(r, err)
		}
		e.unlock()
		close(done)
	}()
	return q, nil
}

// Ibarrier starts a Barrier on ic (MPI_Ibarrier on an intercommunicator).
func (ic *Intercomm) Ibarrier() (Request, error) {
	return ic.start(ic.Barrier)
}

// InterIbcast starts an InterBcast.
func InterIbcast[T Numeric](ic *Intercomm, buf []T, root int) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterBcast(ctx, ic, buf, root) })
}

// InterIreduce starts an InterReduce.
func InterIreduce[T Numeric](ic *Intercomm, send, recv []T, op Op, root int) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterReduce(ctx, ic, send, recv, op, root) })
}

// InterIallreduce starts an InterAllreduce.
func InterIallreduce[T Numeric](ic *Intercomm, send, recv []T, op Op) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterAllreduce(ctx, ic, send, recv, op) })
}

// InterIgather starts an InterGather.
func InterIgather[T Numeric](ic *Intercomm, send, recv []T, root int) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterGather(ctx, ic, send, recv, root) })
}

// InterIscatter starts an InterScatter.
func InterIscatter[T Numeric](ic *Intercomm, send, recv []T, root int) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterScatter(ctx, ic, send, recv, root) })
}

// InterIallgather starts an InterAllgather.
func InterIallgather[T Numeric](ic *Intercomm, send, recv []T) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterAllgather(ctx, ic, send, recv) })
}

// InterIalltoall starts an InterAlltoall.
func InterIalltoall[T Numeric](ic *Intercomm, send, recv []T) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterAlltoall(ctx, ic, send, recv) })
}

// InterIreduceScatter starts an InterReduceScatter.
func InterIreduceScatter[T Numeric](ic *Intercomm, send, recv []T, counts []int, op Op) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterReduceScatter(ctx, ic, send, recv, counts, op) })
}

// InterIreduceScatterBlock starts an InterReduceScatterBlock.
func InterIreduceScatterBlock[T Numeric](ic *Intercomm, send, recv []T, op Op) (Request, error) {
	return ic.start(func(ctx context.Context) error { return InterReduceScatterBlock(ctx, ic, send, recv, op) })
}
