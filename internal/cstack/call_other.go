//go:build !(linux && amd64)

package cstack

const supported = false

func call(fn, arg, stack uintptr) uintptr { panic(ErrUnsupported) }
