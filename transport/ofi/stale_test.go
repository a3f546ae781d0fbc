//go:build ofi

package ofi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
)

// TestStaleSharedMemory: the files of shm endpoints that a killed process
// left behind under the provider's default names (its process id, user id
// and endpoint index) do not keep a later process with the same id from
// opening its endpoints.
func TestStaleSharedMemory(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Fatalf("no /dev/shm: %v", err)
	}
	made := 0
	for i := 0; i < 256; i++ {
		name := fmt.Sprintf("/dev/shm/%d:%d:%d", os.Getpid(), os.Getuid(), i)
		f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // an endpoint of this process
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		made++
		t.Cleanup(func() { os.Remove(name) })
	}
	if made == 0 {
		t.Fatal("made no stale file")
	}
	bp := newBenchPair(t, "shm")
	for i := 1; i <= 3; i++ {
		bp.send(t, 0, 8)
		bp.wait(t, 1, i)
		bp.send(t, 1, 8)
		bp.wait(t, 0, i)
	}
}
