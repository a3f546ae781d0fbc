//go:build ofi

package ofi

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestSweepShm: the files a killed process's shm endpoints left behind
// (its process is gone) are removed by the next adapter over shm; those
// of live processes, of another pid namespace and of other names stay.
func TestSweepShm(t *testing.T) {
	dir := t.TempDir()
	old := shmDir
	shmDir = dir
	t.Cleanup(func() { shmDir = old })

	// A process id that was in use and is no longer.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	files := map[string]bool{ // name: should stay
		fmt.Sprintf("%s%d-0123456789abcdef:0:0", shmPrefix(), dead):         false,
		fmt.Sprintf("%s%d-0123456789abcdef:0:1", shmPrefix(), dead):         false,
		fmt.Sprintf("%s%d-fedcba9876543210:0:0", shmPrefix(), os.Getpid()):  true,
		fmt.Sprintf("%s%d-fedcba9876543210:0:0", shmPrefix(), os.Getppid()): true,
		fmt.Sprintf("amigo-1-%d-0123456789abcdef:0:0", dead):                true, // another namespace
		fmt.Sprintf("amigo-%d-0123456789abcdef:0:0", dead):                  true, // an older name
		fmt.Sprintf("%d:%d:0", dead, os.Getuid()):                           true, // the provider's own
		"unrelated": true,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n := sweepShm(dir); n != 2 {
		t.Errorf("swept %d files, want 2", n)
	}
	for name, stay := range files {
		_, err := os.Stat(filepath.Join(dir, name))
		if stay && err != nil {
			t.Errorf("%s: removed", name)
		}
		if !stay && err == nil {
			t.Errorf("%s: left behind", name)
		}
	}

	// An adapter over shm sweeps the directory as it opens.
	left := fmt.Sprintf("%s%d-0123456789abcdef:0:0", shmPrefix(), dead)
	if err := os.WriteFile(filepath.Join(dir, left), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ads, _ := newWorld(t, 1, Options{Provider: "shm"})
	ads[0].Close()
	if _, err := os.Stat(filepath.Join(dir, left)); err == nil {
		t.Errorf("%s: left behind by the adapter", left)
	}
}
