package mpi

import (
	"fmt"
	"unsafe"
)

type opCode uint8

const (
	opUser opCode = iota
	opSum
	opProd
	opMin
	opMax
	opLand
	opLor
	opBand
	opBor
	opBxor
	opMinLoc
	opMaxLoc
)

// Op is a reduction operation: one of the predefined ones, or one made with
// NewOp. The zero Op is invalid.
type Op struct {
	code    opCode
	name    string
	user    func(in, inout []byte) // NewOp's function on byte views
	kind    kind                   // NewOp's element kind
	commute bool
}

// The predefined operations. They are commutative and apply element-wise.
// Min and Max accept every non-complex type; Land and Lor treat nonzero as
// true and give 1 or 0; Band, Bor and Bxor accept the integer types only.
var (
	Sum  = Op{code: opSum, name: "Sum", commute: true}
	Prod = Op{code: opProd, name: "Prod", commute: true}
	Min  = Op{code: opMin, name: "Min", commute: true}
	Max  = Op{code: opMax, name: "Max", commute: true}
	Land = Op{code: opLand, name: "Land", commute: true}
	Lor  = Op{code: opLor, name: "Lor", commute: true}
	Band = Op{code: opBand, name: "Band", commute: true}
	Bor  = Op{code: opBor, name: "Bor", commute: true}
	Bxor = Op{code: opBxor, name: "Bxor", commute: true}

	// MinLoc and MaxLoc reduce value-index pairs (MPI_MINLOC,
	// MPI_MAXLOC): the slice holds pairs, element 2j the value and 2j+1
	// its index (a rank, say), both of the slice's type, which must be
	// ordered (not complex); its length must be even. Each pair becomes the
	// smallest (largest) value with, among equal values, the smallest
	// index. The collectives keep pairs whole (they treat the ops as
	// non-commutative, so no algorithm splits a vector), and the result is
	// the same on every rank.
	MinLoc = Op{code: opMinLoc, name: "MinLoc"}
	MaxLoc = Op{code: opMaxLoc, name: "MaxLoc"}
)

// checkPairs checks that a reduction of n elements by o fits o: MinLoc and
// MaxLoc take pairs.
func (o Op) checkPairs(n int) error {
	if (o.code == opMinLoc || o.code == opMaxLoc) && n%2 != 0 {
		return o.pairsErr(n)
	}
	return nil
}

// pairsErr is checkPairs' error, apart so that checkPairs is inlined.
func (o Op) pairsErr(n int) error {
	return fmt.Errorf("%w: %v of %d elements: want value-index pairs", ErrCount, o, n)
}

// NewOp makes a user-defined reduction on elements of T. fn combines in into
// inout element by element, as MPI's user functions do: inout[i] = in[i] ∘
// inout[i], where in holds the contribution of lower ranks. The operation
// must be associative; commutative says whether it is also commutative,
// which lets the collectives pick algorithms that reorder operands. fn must
// not keep the slices.
func NewOp[T Numeric](fn func(in, inout []T), commutative bool) Op {
	if fn == nil {
		return Op{}
	}
	return Op{
		code: opUser,
		name: "user",
		user: func(in, inout []byte) {
			fn(viewOf[T](in), viewOf[T](inout))
		},
		kind:    kindOf[T](),
		commute: commutative,
	}
}

// Commutative reports whether the operation is commutative.
func (o Op) Commutative() bool { return o.commute }

func (o Op) String() string {
	if o.name == "" {
		return "invalid op"
	}
	return o.name
}

func (o Op) valid() bool { return o.code != opUser || o.user != nil }

// check reports whether o applies to elements of kind k.
func (o Op) check(k kind) error {
	switch {
	case !o.valid():
		return fmt.Errorf("%w: the zero Op", ErrOp)
	case o.code >= opReplace:
		return fmt.Errorf("%w: %v is for one-sided accumulates only", ErrOp, o)
	case k == kInvalid:
		return fmt.Errorf("%w: unsupported element type", ErrOp)
	case o.code == opUser && o.kind != k:
		return fmt.Errorf("%w: a user op on %v applied to %v", ErrOp, o.kind, k)
	case (o.code == opBand || o.code == opBor || o.code == opBxor) && !k.integer():
		return fmt.Errorf("%w: %v on %v, an integer op", ErrOp, o, k)
	case (o.code == opMin || o.code == opMax || o.code == opMinLoc || o.code == opMaxLoc) && (k == kComplex64 || k == kComplex128):
		return fmt.Errorf("%w: %v on %v, which is not ordered", ErrOp, o, k)
	}
	return nil
}

// viewOf is View without the checks, for buffers the package made or
// checked: their length is a multiple of the element size and they are
// aligned.
func viewOf[T Numeric](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// combine applies inout = in ∘ inout element-wise on elements of kind k.
// o.check(k) has been called.
func combine(k kind, o Op, in, inout []byte) {
	if o.code == opUser {
		o.user(in, inout)
		return
	}
	if o.code == opMinLoc || o.code == opMaxLoc {
		combineLoc(k, o.code == opMaxLoc, in, inout)
		return
	}
	switch k {
	case kFloat64:
		ordered(o.code, viewOf[float64](in), viewOf[float64](inout))
	case kFloat32:
		ordered(o.code, viewOf[float32](in), viewOf[float32](inout))
	case kInt64:
		integer(o.code, viewOf[int64](in), viewOf[int64](inout))
	case kInt32:
		integer(o.code, viewOf[int32](in), viewOf[int32](inout))
	case kInt16:
		integer(o.code, viewOf[int16](in), viewOf[int16](inout))
	case kInt8:
		integer(o.code, viewOf[int8](in), viewOf[int8](inout))
	case kUint64:
		integer(o.code, viewOf[uint64](in), viewOf[uint64](inout))
	case kUint32:
		integer(o.code, viewOf[uint32](in), viewOf[uint32](inout))
	case kUint16:
		integer(o.code, viewOf[uint16](in), viewOf[uint16](inout))
	case kUint8:
		integer(o.code, viewOf[uint8](in), viewOf[uint8](inout))
	case kComplex64:
		complexOp(o.code, viewOf[complex64](in), viewOf[complex64](inout))
	case kComplex128:
		complexOp(o.code, viewOf[complex128](in), viewOf[complex128](inout))
	}
}

type orderedNum interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

type integerNum interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

func integer[T integerNum](code opCode, in, inout []T) {
	inout = inout[:len(in)]
	switch code {
	case opBand:
		for i, v := range in {
			inout[i] &= v
		}
	case opBor:
		for i, v := range in {
			inout[i] |= v
		}
	case opBxor:
		for i, v := range in {
			inout[i] ^= v
		}
	default:
		ordered(code, in, inout)
	}
}

func ordered[T orderedNum](code opCode, in, inout []T) {
	inout = inout[:len(in)]
	switch code {
	case opSum:
		sum(in, inout)
	case opProd:
		for i, v := range in {
			inout[i] *= v
		}
	case opMin:
		for i, v := range in {
			if v < inout[i] {
				inout[i] = v
			}
		}
	case opMax:
		for i, v := range in {
			if v > inout[i] {
				inout[i] = v
			}
		}
	case opLand:
		for i, v := range in {
			inout[i] = truth[T](v != 0 && inout[i] != 0)
		}
	case opLor:
		for i, v := range in {
			inout[i] = truth[T](v != 0 || inout[i] != 0)
		}
	}
}

// sum adds in into inout, four elements a step.
func sum[T Numeric](in, inout []T) {
	n := len(in)
	inout = inout[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		a, b := in[i:i+4:i+4], inout[i:i+4:i+4]
		b[0] += a[0]
		b[1] += a[1]
		b[2] += a[2]
		b[3] += a[3]
	}
	for ; i < n; i++ {
		inout[i] += in[i]
	}
}

func complexOp[T ~complex64 | ~complex128](code opCode, in, inout []T) {
	inout = inout[:len(in)]
	switch code {
	case opSum:
		sum(in, inout)
	case opProd:
		for i, v := range in {
			inout[i] *= v
		}
	case opLand:
		for i, v := range in {
			inout[i] = truth[T](v != 0 && inout[i] != 0)
		}
	case opLor:
		for i, v := range in {
			inout[i] = truth[T](v != 0 || inout[i] != 0)
		}
	}
}

func truth[T Numeric](b bool) T {
	if b {
		return 1
	}
	return 0
}

// combineLoc is MinLoc (MaxLoc if max) on pairs of elements of kind k.
func combineLoc(k kind, max bool, in, inout []byte) {
	switch k {
	case kFloat64:
		loc(max, viewOf[float64](in), viewOf[float64](inout))
	case kFloat32:
		loc(max, viewOf[float32](in), viewOf[float32](inout))
	case kInt64:
		loc(max, viewOf[int64](in), viewOf[int64](inout))
	case kInt32:
		loc(max, viewOf[int32](in), viewOf[int32](inout))
	case kInt16:
		loc(max, viewOf[int16](in), viewOf[int16](inout))
	case kInt8:
		loc(max, viewOf[int8](in), viewOf[int8](inout))
	case kUint64:
		loc(max, viewOf[uint64](in), viewOf[uint64](inout))
	case kUint32:
		loc(max, viewOf[uint32](in), viewOf[uint32](inout))
	case kUint16:
		loc(max, viewOf[uint16](in), viewOf[uint16](inout))
	case kUint8:
		loc(max, viewOf[uint8](in), viewOf[uint8](inout))
	}
}

// loc combines value-index pairs: the better value, or the smaller index
// of equal values.
func loc[T orderedNum](max bool, in, inout []T) {
	for j := 0; j+1 < len(inout) && j+1 < len(in); j += 2 {
		v, i := in[j], in[j+1]
		w, x := inout[j], inout[j+1]
		better := v < w
		if max {
			better = v > w
		}
		if better || v == w && i < x {
			inout[j], inout[j+1] = v, i
		}
	}
}
