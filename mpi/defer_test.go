package mpi_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestDefersOpenCoded builds the package with the compiler's report on
// defers and fails on any defer it does not open-code. An open-coded defer
// costs a few instructions; a stack-allocated one (a function with more
// than 15 defers times returns, or a defer in a loop) a call to
// deferprocStack and one to deferreturn, some 200 instructions, paid by
// every blocking call that takes the engine's lock with a defer (Barrier
// and Allreduce paid it until their bodies moved apart).
func TestDefersOpenCoded(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		// The go command of the toolchain that built this test.
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			t.Fatalf("no go command to build the package with: %v", err)
		}
	}
	out, err := exec.Command(goTool, "build", "-gcflags=github.com/amigo-hpc/amigo/mpi=-d=defer", "-o", "/dev/null", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	open := 0
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasSuffix(line, "open-coded defer"):
			open++
		case strings.HasSuffix(line, "stack-allocated defer"), strings.HasSuffix(line, "heap-allocated defer"):
			t.Errorf("%s: move the body apart from the defer, or use fewer returns", line)
		}
	}
	if open == 0 {
		t.Fatalf("the compiler reported no defers (-d=defer):\n%s", out)
	}
}
