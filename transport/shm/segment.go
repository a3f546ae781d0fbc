package shm

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Segments are memfd files: they have no name in any file system, so nothing
// is left behind when every process that mapped one has exited, however it
// exited. A peer maps one by opening /proc/PID/fd/FD of its owner, which the
// kernel allows to a process of the same user that may read the owner's
// /proc entries (ptrace read access, which Yama does not restrict). The
// segment is made mode 0600 before it is published.

// newMemfd makes a shared-memory file of size bytes and maps it.
func newMemfd(name string, size int) (fd int, mem []byte, err error) {
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("fchmod segment: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("size segment to %d bytes: %w", size, err)
	}
	mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("map segment of %d bytes: %w", size, err)
	}
	return fd, mem, nil
}

// populate enters the pages of a segment's header, port and engine blocks
// and of its descriptor buffers in this process's page tables now (madvise
// MADV_POPULATE_WRITE), allocating them in a segment this process just
// made. Descriptor buffers otherwise take a page fault per page on their
// first lap, each a few microseconds (more in a virtual machine), in the
// middle of a fresh job's first messages: a 2-rank allreduce of 64 bytes
// measured 0.30-0.92 us over its first 1100 iterations without it and
// 0.22-0.34 us with the whole segment populated (amibench, four alternating
// runs). The tables (mirror, access, allocs: over a mebibyte, mostly never
// touched) and the chunk rings of the pipelined copy (a mebibyte per peer
// context; the first pipelined transfer is not counted when the ways are
// measured) fault in on use. Kernels before 5.14 refuse the advice, and
// pages fault in on first use.
func populate(mem []byte, l layout) {
	for _, r := range [2][2]int{{0, l.mirrorOff}, {l.ringsOff, l.chansOff}} {
		if from, to := r[0], min(r[1], len(mem)); from < to {
			_ = unix.Madvise(mem[from:to], unix.MADV_POPULATE_WRITE)
		}
	}
}

// mapPeer maps want bytes of the memfd that process pid holds as fd. It
// checks that the file is at least that large, so that no access within the
// mapping can fault.
func mapPeer(pid, fd, want int) ([]byte, error) {
	if want <= 0 || want > maxSegment {
		return nil, fmt.Errorf("segment of %d bytes", want)
	}
	path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < int64(want) {
		return nil, fmt.Errorf("%s: not a segment of %d bytes (mode %#o, %d bytes)", path, want, st.Mode, st.Size)
	}
	mem, err := unix.Mmap(f, 0, want, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return mem, nil
}

// token proves that a segment belongs to rank of the job whose secret it is.
func token(secret []byte, rank int) [tokenSize]byte {
	h := sha256.New()
	h.Write([]byte("amigo-shm-segment\x00"))
	h.Write(secret)
	var r [8]byte
	binary.LittleEndian.PutUint64(r[:], uint64(rank))
	h.Write(r[:])
	var t [tokenSize]byte
	copy(t[:], h.Sum(nil))
	return t
}

// kvsKey is the bootstrap key under which a rank publishes its segment.
const kvsKey = "amigo-shm"

// published is what a rank publishes: where its segment is and where the
// bytes of its cross-memory attach probe are.
type published struct {
	pid   int
	fd    int
	size  int
	probe uint64 // address of the probe bytes in the owner
}

func (p published) encode() []byte {
	return []byte(fmt.Sprintf("v1 pid=%d fd=%d size=%d probe=%x", p.pid, p.fd, p.size, p.probe))
}

var errPublished = errors.New("malformed shared-memory address")

// parsePublished decodes a published value. It accepts exactly what encode
// writes, with every number in range.
func parsePublished(b []byte) (published, error) {
	f := strings.Split(string(b), " ")
	if len(f) != 5 || f[0] != "v1" {
		return published{}, fmt.Errorf("%w: %q", errPublished, trunc(b))
	}
	var p published
	for i, name := range []string{"pid", "fd", "size", "probe"} {
		v, ok := strings.CutPrefix(f[i+1], name+"=")
		if !ok || v == "" || len(v) > 16 {
			return published{}, fmt.Errorf("%w: %q", errPublished, trunc(b))
		}
		base := 10
		if name == "probe" {
			base = 16
		}
		n, err := strconv.ParseUint(v, base, 64)
		if err != nil {
			return published{}, fmt.Errorf("%w: %s: %v", errPublished, name, err)
		}
		switch name {
		case "pid":
			if n == 0 || n > 1<<22 {
				return published{}, fmt.Errorf("%w: pid %d", errPublished, n)
			}
			p.pid = int(n)
		case "fd":
			if n > 1<<30 {
				return published{}, fmt.Errorf("%w: fd %d", errPublished, n)
			}
			p.fd = int(n)
		case "size":
			if n < headerSize || n > maxSegment {
				return published{}, fmt.Errorf("%w: size %d", errPublished, n)
			}
			p.size = int(n)
		case "probe":
			p.probe = n
		}
	}
	return p, nil
}

func trunc(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// addrOf returns the address of the first byte of b.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// alive reports whether process pid exists (a zombie counts as gone only
// through its pidfd; this is the fallback check).
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

var pageSz = os.Getpagesize()
