package mpi

import (
	"fmt"
	"reflect"
	"unsafe"
)

// Numeric is the set of element types the typed helpers and the reductions
// accept: Go's integer, floating-point and complex types, and types defined
// on them.
type Numeric interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

// Bytes returns the memory of s as a byte slice, without copying: a view
// that aliases s. The view's length is len(s) times the element size.
func Bytes[T Numeric](s []T) []byte {
	if len(s) == 0 {
		if s == nil {
			return nil
		}
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// View returns b as a slice of T, without copying: the inverse of Bytes.
// len(b) must be a multiple of the element size and b must be aligned for
// T; View returns nil otherwise.
func View[T Numeric](b []byte) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	if len(b)%size != 0 {
		return nil
	}
	if len(b) == 0 {
		return []T{}
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(p)%unsafe.Alignof(z) != 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), len(b)/size)
}

// sizeOf returns the size of T in bytes.
func sizeOf[T Numeric]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// kind is the machine type of an element, which selects the reduction
// kernel.
type kind uint8

const (
	kInvalid kind = iota
	kInt8
	kInt16
	kInt32
	kInt64
	kUint8
	kUint16
	kUint32
	kUint64
	kFloat32
	kFloat64
	kComplex64
	kComplex128
)

var kindNames = [...]string{"invalid", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64", "complex64", "complex128"}

func (k kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

func (k kind) size() int {
	switch k {
	case kInt8, kUint8:
		return 1
	case kInt16, kUint16:
		return 2
	case kInt32, kUint32, kFloat32:
		return 4
	case kInt64, kUint64, kFloat64, kComplex64:
		return 8
	case kComplex128:
		return 16
	}
	return 0
}

func (k kind) integer() bool { return k >= kInt8 && k <= kUint64 }

// kindOf returns the kind of T. The predeclared types are told apart by a
// type switch on a nil pointer, which costs no allocation; only types defined
// on them (type Celsius float64) take the reflect path.
func kindOf[T Numeric]() kind {
	switch any((*T)(nil)).(type) {
	case *float64:
		return kFloat64
	case *float32:
		return kFloat32
	case *int:
		return intKind(unsafe.Sizeof(int(0)), true)
	case *int64:
		return kInt64
	case *int32:
		return kInt32
	case *int16:
		return kInt16
	case *int8:
		return kInt8
	case *uint:
		return intKind(unsafe.Sizeof(uint(0)), false)
	case *uint64:
		return kUint64
	case *uint32:
		return kUint32
	case *uint16:
		return kUint16
	case *uint8:
		return kUint8
	case *uintptr:
		return intKind(unsafe.Sizeof(uintptr(0)), false)
	case *complex64:
		return kComplex64
	case *complex128:
		return kComplex128
	}
	return kindOfDefined(reflect.TypeFor[T]())
}

func intKind(size uintptr, signed bool) kind {
	switch {
	case size == 4 && signed:
		return kInt32
	case size == 4:
		return kUint32
	case signed:
		return kInt64
	}
	return kUint64
}

func kindOfDefined(t reflect.Type) kind {
	switch t.Kind() {
	case reflect.Int:
		return intKind(t.Size(), true)
	case reflect.Int8:
		return kInt8
	case reflect.Int16:
		return kInt16
	case reflect.Int32:
		return kInt32
	case reflect.Int64:
		return kInt64
	case reflect.Uint, reflect.Uintptr:
		return intKind(t.Size(), false)
	case reflect.Uint8:
		return kUint8
	case reflect.Uint16:
		return kUint16
	case reflect.Uint32:
		return kUint32
	case reflect.Uint64:
		return kUint64
	case reflect.Float32:
		return kFloat32
	case reflect.Float64:
		return kFloat64
	case reflect.Complex64:
		return kComplex64
	case reflect.Complex128:
		return kComplex128
	}
	return kInvalid
}

// Elements returns the number of whole elements of T that a status's Count
// of bytes holds: MPI_Get_count.
func Elements[T Numeric](s Status) int { return s.Count / sizeOf[T]() }
