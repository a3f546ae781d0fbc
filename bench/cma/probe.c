// probe.c: what one core moves by cross-memory attach on this host, the
// ceiling of amigo's mid-size path with Go (heap) buffers. Two processes,
// one per core: the caller moves a buffer of its own from or to its
// peer's with process_vm_readv or process_vm_writev, N pieces of SIZE
// bytes a call (the peer's buffer reused by every piece, as a window of
// osu_bw messages reuses one send buffer), and prints GB/s and us a call.
// The peer's buffer is on small pages or, with HUGE, on a transparent huge
// page; the caller's own buffer does not matter (the kernel pins the
// peer's pages, not the caller's). Run by bench/cma/probe.sh.
//
//   probe SIZE N read|write CALLS [small|huge]
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

static char *buffer(size_t n, int huge, int fill) {
  size_t block = 2 << 20, len = n < block ? block : n;
  char *b = aligned_alloc(block, len);
  if (!b) {
    perror("aligned_alloc");
    exit(1);
  }
  if (huge) madvise(b, len, MADV_HUGEPAGE);
  memset(b, fill, len);
  return b;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: probe SIZE N read|write CALLS [small|huge]\n");
    return 2;
  }
  size_t size = strtoul(argv[1], 0, 0);
  int n = atoi(argv[2]), wr = strcmp(argv[3], "write") == 0, calls = atoi(argv[4]);
  int huge = argc > 5 && strcmp(argv[5], "huge") == 0;
  if (n < 1 || n > 1024 || size == 0 || calls < 1) {
    fprintf(stderr, "probe: bad arguments\n");
    return 2;
  }
  volatile long *stop = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int p[2];
  if (pipe(p) != 0) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    pin(1);
    char *own = buffer(size, huge, 3);
    long a = (long)own;
    if (write(p[1], &a, sizeof a) != sizeof a) _exit(1);
    while (!*stop) usleep(100);
    _exit(0);
  }
  pin(0);
  char *local = buffer(size, 0, 4);
  long remote;
  if (read(p[0], &remote, sizeof remote) != sizeof remote) return 1;
  struct iovec *l = calloc(n, sizeof *l), *r = calloc(n, sizeof *r);
  for (int i = 0; i < n; i++) {
    l[i].iov_base = local;
    l[i].iov_len = size;
    r[i].iov_base = (void *)remote;
    r[i].iov_len = size;
  }
  int rc = 0;
  double t0 = 0;
  for (int i = -calls / 10 - 1; i < calls; i++) {
    if (i == 0) t0 = now();
    ssize_t got = wr ? process_vm_writev(pid, l, n, r, n, 0) : process_vm_readv(pid, l, n, r, n, 0);
    if (got != (ssize_t)(size * n)) {
      perror("process_vm_rw");
      rc = 1;
      break;
    }
  }
  double t = now() - t0;
  if (rc == 0)
    printf("%s %zu B x %d, peer on %s pages: %.1f GB/s, %.2f us a call\n", wr ? "writev" : "readv", size, n,
           huge ? "huge" : "small", (double)size * n * calls / t / 1e9, t / calls * 1e6);
  *stop = 1;
  waitpid(pid, 0, 0);
  return rc;
}
