//go:build !amd64

package ring

// pause waits a moment without touching shared memory (pause_amd64.s);
// elsewhere it does nothing.
func pause(n int) {}

var recordPause = 0
