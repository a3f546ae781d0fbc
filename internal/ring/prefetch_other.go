//go:build !amd64

package ring

import "unsafe"

// prefetchw is a hint the other architectures go without.
func prefetchw(p unsafe.Pointer) {}
