package mpi

import (
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/amigo-hpc/amigo"
)

// DefaultDispatch is the AMI dispatch id package mpi uses unless
// Options.Dispatch names another.
const DefaultDispatch amigo.Dispatch = 1000

// Options configure the mpi layer of one amigo context. The zero value of
// every field selects its default; the thresholds can also be set by the
// AMIGO_MPI_* environment variable named in their comment, which wins, as
// the AMIGO_* variables do for amigo.Config. Every rank must use the same
// values: the collectives choose their algorithm from them.
type Options struct {
	// Dispatch is the AMI dispatch id of all of the layer's messages
	// (default DefaultDispatch). Every rank must use the same one.
	Dispatch amigo.Dispatch
	// UnexpectedRetain bounds the bytes of buffers kept for reuse by
	// messages that arrive inline before their receive is posted (default
	// 1 MiB). Buffers beyond it are given back to the garbage collector.
	UnexpectedRetain int
	// ScratchRetain bounds the bytes of collective scratch buffers kept for
	// reuse (AMIGO_MPI_SCRATCH_RETAIN, default 64 MiB).
	ScratchRetain int
	// MatchBuckets is the number of hash buckets of the posted and
	// unexpected queues, a power of two (default 256).
	MatchBuckets int

	// AllreduceShortMax is the largest Allreduce, in bytes, done by
	// recursive doubling; larger ones with a commutative op are done by
	// reduce-scatter and allgather (AMIGO_MPI_ALLREDUCE_SHORT, default
	// 16384).
	AllreduceShortMax int
	// AllreduceFlatRanks is the most ranks whose Allreduce of a small
	// message (one that travels in a descriptor) is gathered and reduced
	// at rank 0, in rank order, and sent back by it, when there are more
	// than 4 and a host of the job is oversubscribed (amigo.Context.Oversubscribed
	// on any rank): each rank then waits
	// once instead of log2 p times, and with more ranks than processors
	// each wait is a hand-over of a processor
	// (AMIGO_MPI_ALLREDUCE_FLAT_RANKS, default 16; -1 turns it off).
	AllreduceFlatRanks int
	// ReduceShortMax is the largest Reduce, in bytes, done along a binomial
	// tree; larger ones with a commutative op are done by reduce-scatter and
	// a gather to the root (AMIGO_MPI_REDUCE_SHORT, default 16384).
	ReduceShortMax int
	// BcastShortMax is the largest Bcast, in bytes, sent along a binomial
	// tree; larger ones on more than two ranks are pipelined along a chain
	// in segments of BcastSegment bytes (AMIGO_MPI_BCAST_SHORT, default
	// 65536; AMIGO_MPI_BCAST_SEGMENT, default 262144).
	BcastShortMax int
	BcastSegment  int
	// BcastFlatMax and BcastFlatRanks bound the Bcasts the root sends to
	// every rank itself, in one round: at most BcastFlatMax bytes on at most
	// BcastFlatRanks ranks (AMIGO_MPI_BCAST_FLAT, default 4096;
	// AMIGO_MPI_BCAST_FLAT_RANKS, default 16). A receiver then waits for
	// the root alone, not for the ranks above it in a tree to be scheduled
	// and forward the message: on a host with fewer cores than ranks that
	// is the difference between a microsecond and a time slice.
	BcastFlatMax   int
	BcastFlatRanks int
	// BarrierFlatRanks is the most ranks whose Barrier checks in with rank 0
	// and is released by it (two rounds); more ranks, and two, use
	// dissemination (ceil(log2 p) rounds) (AMIGO_MPI_BARRIER_FLAT_RANKS,
	// default 16).
	BarrierFlatRanks int
	// BcastMulticastMin is the smallest Bcast, in bytes, on more than two
	// ranks, that uses the AMI's RDMA multicast (AMIGO_MPI_BCAST_MULTICAST,
	// default 262144; Never turns it off). See Bcast.
	BcastMulticastMin int
	// AllgatherShortMax is the largest Allgather result, in bytes, gathered
	// by Bruck's algorithm; larger ones go around a ring
	// (AMIGO_MPI_ALLGATHER_SHORT, default 65536).
	AllgatherShortMax int
	// GatherShortMax is the largest Gather or Scatter total, in bytes, sent
	// along a binomial tree; larger ones go directly between the root and
	// each rank (AMIGO_MPI_GATHER_SHORT, default 16384).
	GatherShortMax int
	// AlltoallShortMax is the largest block, in bytes, for which Alltoall
	// posts every send and receive at once; larger blocks are exchanged in
	// pairs, one peer a step (AMIGO_MPI_ALLTOALL_SHORT, default 1024).
	AlltoallShortMax int
	// SharedCollMax is the largest Allreduce, in bytes, that the ranks of
	// a communicator on one host do through a shared-memory segment of the
	// communicator instead of messages (AMIGO_MPI_SHARED_COLL, default 256,
	// at most 4096; a negative value turns shared-memory collectives off,
	// Barrier's as well). See Barrier and Allreduce.
	SharedCollMax int

	// AccumulateRescue is how long, in microseconds, an origin waits for
	// the target's reply to an accumulate message before it takes the
	// message back and applies it itself with remote atomics, which need
	// nothing of the target's program: a target that computes outside mpi
	// then holds no origin up (AMIGO_MPI_ACC_RESCUE_US, default 20000).
	AccumulateRescue int
}

type optSetting struct {
	env string
	ptr func(*Options) *int
	def int
}

var optSettings = []optSetting{
	{"AMIGO_MPI_SCRATCH_RETAIN", func(o *Options) *int { return &o.ScratchRetain }, 64 << 20},
	{"AMIGO_MPI_ALLREDUCE_SHORT", func(o *Options) *int { return &o.AllreduceShortMax }, 16 << 10},
	{"AMIGO_MPI_ALLREDUCE_FLAT_RANKS", func(o *Options) *int { return &o.AllreduceFlatRanks }, 16},
	{"AMIGO_MPI_REDUCE_SHORT", func(o *Options) *int { return &o.ReduceShortMax }, 16 << 10},
	{"AMIGO_MPI_BCAST_SHORT", func(o *Options) *int { return &o.BcastShortMax }, 64 << 10},
	{"AMIGO_MPI_BCAST_FLAT", func(o *Options) *int { return &o.BcastFlatMax }, 4 << 10},
	{"AMIGO_MPI_BCAST_FLAT_RANKS", func(o *Options) *int { return &o.BcastFlatRanks }, 16},
	{"AMIGO_MPI_BARRIER_FLAT_RANKS", func(o *Options) *int { return &o.BarrierFlatRanks }, 16},
	{"AMIGO_MPI_BCAST_SEGMENT", func(o *Options) *int { return &o.BcastSegment }, 256 << 10},
	{"AMIGO_MPI_BCAST_MULTICAST", func(o *Options) *int { return &o.BcastMulticastMin }, 256 << 10},
	{"AMIGO_MPI_ALLGATHER_SHORT", func(o *Options) *int { return &o.AllgatherShortMax }, 64 << 10},
	{"AMIGO_MPI_GATHER_SHORT", func(o *Options) *int { return &o.GatherShortMax }, 16 << 10},
	{"AMIGO_MPI_ALLTOALL_SHORT", func(o *Options) *int { return &o.AlltoallShortMax }, 1 << 10},
	{"AMIGO_MPI_SHARED_COLL", func(o *Options) *int { return &o.SharedCollMax }, 256},
	{"AMIGO_MPI_ACC_RESCUE_US", func(o *Options) *int { return &o.AccumulateRescue }, 20000},
}

// Never, as a threshold, selects the algorithm for short messages at every
// size; a negative threshold selects the one for long messages at every
// size. Tests and benchmarks use them to force an algorithm.
const Never = math.MaxInt

func (o Options) resolve(environ func(string) (string, bool)) (Options, error) {
	for _, s := range optSettings {
		if v, ok := environ(s.env); ok && v != "" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return o, errorf("mpi: %s=%q: %v", s.env, v, err)
			}
			*s.ptr(&o) = n
		}
		if p := s.ptr(&o); *p == 0 {
			*p = s.def
		}
	}
	if o.Dispatch == 0 {
		o.Dispatch = DefaultDispatch
	}
	if o.UnexpectedRetain == 0 {
		o.UnexpectedRetain = 1 << 20
	}
	if o.MatchBuckets == 0 {
		o.MatchBuckets = 256
	}
	switch {
	case o.Dispatch >= amigo.MaxDispatch:
		return o, errorf("mpi: Dispatch %d: want below %d", o.Dispatch, amigo.MaxDispatch)
	case o.MatchBuckets < 1 || o.MatchBuckets > 1<<20 || o.MatchBuckets&(o.MatchBuckets-1) != 0:
		return o, errorf("mpi: MatchBuckets %d: want a power of two up to 1<<20", o.MatchBuckets)
	case o.BcastSegment < 1:
		return o, errorf("mpi: BcastSegment %d: want at least 1", o.BcastSegment)
	case o.AccumulateRescue < 1:
		return o, errorf("mpi: AccumulateRescue %d: want at least 1 (microseconds)", o.AccumulateRescue)
	}
	return o, nil
}

func lookupEnv(k string) (string, bool) { return os.LookupEnv(k) }
