//go:build linux

package cstack

const supported = true

//go:noescape
func call(fn, arg, stack uintptr) uintptr
