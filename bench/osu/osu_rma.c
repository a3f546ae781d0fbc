/*
 * osu_rma.c: one-sided latencies through MPI windows, with the OSU
 * micro-benchmarks' definitions (osu_put_latency, osu_get_latency,
 * osu_acc_latency, osu_fop_latency in their default mode: a window made by
 * MPI_Win_allocate, a passive-target epoch opened once by MPI_Win_lock_all,
 * each operation completed by MPI_Win_flush), so that bench/compare_win.sh
 * measures MPICH and Open MPI next to amibench's win_* benchmarks.
 *
 *   mpiexec -n 2 ./osu_rma put|get|acc|fop [--min-size N] [--max-size N] [--json]
 *
 * put/get: rank 0 puts (gets) size bytes into (from) rank 1's window and
 *     flushes, iters times; the latency is the time per operation.
 * acc: MPI_Accumulate of size/4 ints with MPI_SUM, then flush.
 * fop: MPI_Fetch_and_op of one 64-bit integer with MPI_SUM, then flush
 *     (size fixed at 8).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

static int rank, size, json;
static long min_size = 0, max_size = 1L << 20;

static void row(const char *bench, long sz, double v) {
	if (rank != 0)
		return;
	if (json)
		printf("{\"benchmark\":\"%s\",\"size\":%ld,\"latency_us\":%.3f,\"ranks\":%d}\n", bench, sz, v, size);
	else
		printf("%-10ld%20.2f\n", sz, v);
	fflush(stdout);
}

static void run(const char *what) {
	int fop = !strcmp(what, "fop"), acc = !strcmp(what, "acc"), get = !strcmp(what, "get");
	long lo = min_size, hi = max_size;
	if (fop)
		lo = hi = 8;
	if (acc && lo < 4)
		lo = 4;
	char *win_mem = NULL, *buf = NULL, *res = NULL;
	MPI_Win win;
	MPI_Win_allocate(hi ? hi : 1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
	if (posix_memalign((void **)&buf, 4096, hi ? hi : 1) || posix_memalign((void **)&res, 4096, hi ? hi : 1)) {
		fprintf(stderr, "out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(buf, 1, hi ? hi : 1);
	memset(win_mem, 0, hi ? hi : 1);
	if (rank == 0 && !json)
		printf("# MPI %s latency (%d ranks)\n%-10s%20s\n", what, size, "# Size", "Latency (us)");
	MPI_Win_lock_all(0, win);
	for (long sz = lo; sz <= hi; sz = sz ? sz * 2 : 1) {
		int iters = sz > LARGE ? 1000 : 10000, skip = sz > LARGE ? 10 : 100;
		double t0 = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0) {
			for (int i = 0; i < iters + skip; i++) {
				if (i == skip)
					t0 = MPI_Wtime();
				if (fop)
					MPI_Fetch_and_op(buf, res, MPI_LONG_LONG, 1, 0, MPI_SUM, win);
				else if (acc)
					MPI_Accumulate(buf, (int)(sz / 4), MPI_INT, 1, 0, (int)(sz / 4), MPI_INT, MPI_SUM, win);
				else if (get)
					MPI_Get(buf, (int)sz, MPI_CHAR, 1, 0, (int)sz, MPI_CHAR, win);
				else
					MPI_Put(buf, (int)sz, MPI_CHAR, 1, 0, (int)sz, MPI_CHAR, win);
				MPI_Win_flush(1, win);
			}
			row(what, sz, (MPI_Wtime() - t0) * 1e6 / iters);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (fop)
			break;
	}
	MPI_Win_unlock_all(win);
	MPI_Win_free(&win);
	free(buf);
	free(res);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *what = argc > 1 ? argv[1] : "put";
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--min-size") && i + 1 < argc)
			min_size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = atol(argv[++i]);
		else {
			if (rank == 0)
				fprintf(stderr, "osu_rma: unknown argument %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (size < 2 || min_size < 0 || max_size < min_size ||
	    (strcmp(what, "put") && strcmp(what, "get") && strcmp(what, "acc") && strcmp(what, "fop"))) {
		if (rank == 0)
			fprintf(stderr, "osu_rma: put|get|acc|fop with 2 or more ranks and sizes 0 <= min <= max\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	run(what);
	MPI_Finalize();
	return 0;
}
