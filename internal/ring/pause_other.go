//go:build !amd64

package ring

import "unsafe"

// pause waits a moment without touching shared memory (pause_amd64.s);
// elsewhere it does nothing.
func pause(n int) {}

var recordPause = 0

// prefetchw is a hint the other architectures go without.
func prefetchw(p unsafe.Pointer) {}
