package shm

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// anonHugeKB returns the AnonHugePages of this process's mapping that holds
// addr, from /proc/self/smaps.
func anonHugeKB(t *testing.T, addr uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("no smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			lo, hi, _ := strings.Cut(fields[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h
			continue
		}
		if in && strings.HasPrefix(line, "AnonHugePages:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return kb
		}
	}
	return 0
}

// TestCollapseHuge: a large Go buffer, once collapsed, lies on huge pages
// with its contents unchanged, and its blocks are asked for once only.
func TestCollapseHuge(t *testing.T) {
	ForgetHuge()
	buf := make([]byte, 6<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	addr := uintptr(unsafe.Pointer(&buf[0]))
	before := anonHugeKB(t, addr)
	asked, collapsed := collapseHuge(buf, hugeMinOverlap)
	// 6 MiB covers at least two whole blocks and parts of up to two more.
	if asked < 2 || asked > 4 {
		t.Fatalf("asked for %d blocks of a 6 MiB buffer", asked)
	}
	// A block the kernel refused for the moment (EAGAIN, as it may under
	// load) is asked for again, up to hugeTries tries in all; a block that
	// collapsed, or was refused for good, never is.
	open := asked - collapsed
	for try := 1; open > 0 && try < hugeTries; try++ {
		a, c := collapseHuge(buf, hugeMinOverlap)
		if a > open {
			t.Fatalf("try %d asked for %d blocks, of which only %d had not collapsed", try+1, a, open)
		}
		collapsed += c
		open = a - c
	}
	if collapsed == 0 {
		// Only a kernel that refuses every collapse (before Linux 6.1)
		// excuses this; one that collapses a fresh block must have
		// collapsed these.
		if err := ProbeHuge(); err != nil {
			t.Skipf("the kernel collapses nothing here: %v", err)
		}
		t.Fatalf("the kernel collapsed none of %d blocks, though it collapses a fresh one", asked)
	}
	// MADV_COLLAPSE succeeding says the block now lies on a huge page; the
	// mapping holds at least those (blocks of earlier runs in this
	// process may have been huge already).
	if after := anonHugeKB(t, addr); after < 2048*collapsed || after < before {
		t.Fatalf("AnonHugePages of the heap mapping %d kB before, %d after %d collapses", before, after, collapsed)
	}
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d changed by the collapse", i)
		}
	}
	if a, _ := collapseHuge(buf, hugeMinOverlap); a != 0 {
		t.Fatalf("asked again for %d blocks", a)
	}
	// Sub-slices of blocks already asked for are not asked for again;
	// small buffers never are.
	if a, _ := collapseHuge(buf[1<<20:3<<20], hugeMinOverlap); a != 0 {
		t.Fatalf("asked again for %d blocks of a sub-slice", a)
	}
	if a, _ := collapseHuge(make([]byte, hugeMinOverlap-1), hugeMinOverlap); a != 0 {
		t.Fatalf("asked for %d blocks of a small buffer", a)
	}
}

// TestHugeBlocksOf: which blocks a buffer covers enough of.
func TestHugeBlocksOf(t *testing.T) {
	cases := []struct {
		at, n uintptr
		want  []uintptr
	}{
		{hugeSize, hugeSize, []uintptr{hugeSize}},
		// Half in block 0, which is never named, half in block 1.
		{hugeSize - hugeMinOverlap, 2 * hugeMinOverlap, []uintptr{hugeSize}},
		{hugeSize - 1000, 1 << 20, []uintptr{hugeSize}},
		{3*hugeSize - (1 << 20), 1 << 20, []uintptr{2 * hugeSize}},
		{3*hugeSize - (512 << 10), 1 << 20, []uintptr{2 * hugeSize, 3 * hugeSize}},
	}
	// A registered region: any block it covers a page of.
	regions := []struct {
		at, n uintptr
		want  []uintptr
	}{
		{hugeSize + 4096, 16 << 10, []uintptr{hugeSize}},
		{2*hugeSize - 8192, 16 << 10, []uintptr{hugeSize, 2 * hugeSize}},
		{2*hugeSize - 1024, 8 << 10, []uintptr{2 * hugeSize}},
		{hugeSize, pageSize - 1, nil},
	}
	for _, c := range cases {
		checkBlocks(t, c.at, c.n, hugeMinOverlap, c.want)
	}
	for _, c := range regions {
		checkBlocks(t, c.at, c.n, hugeRegionOverlap, c.want)
	}
}

// checkBlocks checks the blocks that n bytes at at cover least bytes of.
func checkBlocks(t *testing.T, at, n, least uintptr, want []uintptr) {
	t.Helper()
	var got []uintptr
	hugeBlocksOfRange(at, n, least, func(b uintptr) { got = append(got, b) })
	if len(got) != len(want) {
		t.Fatalf("range %#x+%#x, %d bytes a block: blocks %#x, want %#x", at, n, least, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("range %#x+%#x, %d bytes a block: blocks %#x, want %#x", at, n, least, got, want)
		}
	}
}

// TestClaimHuge: each block is asked for by one claimer at a time, never
// again once over, and again after a failed try, up to hugeTries tries.
func TestClaimHuge(t *testing.T) {
	ForgetHuge()
	const base = uintptr(1) << 46 // far from any mapping: the table holds numbers only
	for i := uintptr(0); i < 64; i++ {
		b := base + i*hugeSize
		s, ok := claimHuge(b)
		if !ok {
			t.Fatalf("block %d not claimed the first time", i)
		}
		if _, again := claimHuge(b); again {
			t.Fatalf("block %d claimed while busy", i)
		}
		finishHuge(s, true)
		if _, again := claimHuge(b); again {
			t.Fatalf("block %d claimed once over", i)
		}
	}
	// Failed tries: asked again, hugeTries times in all.
	b := base + 100*hugeSize
	tries := 0
	for {
		s, ok := claimHuge(b)
		if !ok {
			break
		}
		tries++
		finishHuge(s, false)
		if tries > hugeTries {
			break
		}
	}
	if tries != hugeTries {
		t.Fatalf("a block that kept failing was tried %d times, want %d", tries, hugeTries)
	}
	// Many claimers: each block is claimed once.
	wins := make(chan bool, 64*8)
	done := make(chan struct{})
	for g := 0; g < 8; g++ {
		go func() {
			for i := uintptr(200); i < 264; i++ {
				s, ok := claimHuge(base + i*hugeSize)
				if ok {
					finishHuge(s, true)
				}
				wins <- ok
			}
			done <- struct{}{}
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	close(wins)
	n := 0
	for w := range wins {
		if w {
			n++
		}
	}
	if n != 64 {
		t.Fatalf("64 blocks claimed %d times by 8 goroutines", n)
	}
}

// TestHugeLast: a buffer inside the block last found settled is not looked
// up again, and a buffer in any other block still is. The kernel's part is
// played by a stand-in that collapses every block asked for: a refusal for
// the moment would have the block asked for again, which TestClaimHuge and
// TestCollapseHuge cover.
func TestHugeLast(t *testing.T) {
	kernel := collapseBlock
	var calls []uintptr
	collapseBlock = func(b uintptr) unix.Errno { calls = append(calls, b); return 0 }
	defer func() { collapseBlock = kernel }()
	ForgetHuge()
	buf := make([]byte, 8<<20)
	addr := uintptr(unsafe.Pointer(&buf[0]))
	first := (addr + hugeSize - 1) &^ (hugeSize - 1) // two whole blocks from here
	in := func(b uintptr) []byte { off := int(b - addr); return buf[off+4096 : off+4096+65536] }
	if a, _ := collapseHuge(in(first), pageSize); a != 1 {
		t.Fatalf("asked for %d blocks of a buffer in a fresh block", a)
	}
	if hugeLast.Load() == first {
		t.Fatal("the block counts as settled before anyone found it so")
	}
	if a, _ := collapseHuge(in(first), pageSize); a != 0 {
		t.Fatalf("asked again for %d blocks", a)
	}
	if hugeLast.Load() != first {
		t.Fatalf("the block found settled is %#x, want %#x", hugeLast.Load(), first)
	}
	if a, _ := collapseHuge(in(first), pageSize); a != 0 {
		t.Fatalf("asked again for %d blocks", a)
	}
	if a, _ := collapseHuge(in(first+hugeSize), pageSize); a != 1 {
		t.Fatalf("asked for %d blocks of a buffer in the next, fresh block", a)
	}
	// A buffer across the settled block's end is looked up block by block.
	across := buf[int(first+hugeSize-addr)-8192 : int(first+hugeSize-addr)+8192]
	if a, _ := collapseHuge(across, pageSize); a != 0 {
		t.Fatalf("asked for %d blocks of a buffer across two asked-for blocks", a)
	}
	ForgetHuge()
	if a, _ := collapseHuge(in(first), pageSize); a != 1 {
		t.Fatalf("after ForgetHuge, asked for %d blocks of the first buffer", a)
	}
	if want := []uintptr{first, first + hugeSize, first}; !slices.Equal(calls, want) {
		t.Fatalf("the kernel was asked for blocks %#x, want %#x", calls, want)
	}
	runtime.KeepAlive(buf)
}
