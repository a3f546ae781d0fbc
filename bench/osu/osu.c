/*
 * osu.c: the point-to-point and all-to-all measurements of amibench, in C
 * over MPI, with the OSU micro-benchmarks' methodology (sizes, warm-up and
 * iteration counts, a window of 64 for bandwidth), so that bench/compare.sh
 * runs the same patterns with MPICH and Open MPI next to amibench.
 *
 *   mpiexec -n 2  ./osu latency [--min-size N] [--max-size N] [--iterations N] [--warmup N] [--json]
 *   mpiexec -n 2  ./osu bw|bibw ...
 *   mpiexec -n 16 ./osu a2a --min-size 1024 --max-size 1024
 *
 * latency: ping-pong of MPI_Send/MPI_Recv between ranks 0 and 1 (osu_latency).
 * bw: rank 0 sends windows of 64 MPI_Isend, rank 1 posts 64 MPI_Irecv and
 *     acknowledges each window (osu_bw). bibw: both directions (osu_bibw).
 * a2a: in each iteration every rank MPI_Isends a message to every other rank
 *     and MPI_Irecvs one from each (the pattern of amibench's a2a).
 * Output is OSU's columns, or one JSON object per line with --json.
 * Buffers come from malloc, page-aligned, as OSU's.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192
#define WINDOW 64

static int rank, size, json;
static long min_size = 0, max_size = 4L << 20;
static int iterations, warmup = -1; /* 0, -1: OSU's counts */

static void counts(long sz, int lat, int coll, int *iters, int *skip) {
	if (coll) {
		*iters = sz > LARGE ? 100 : 1000;
		*skip = sz > LARGE ? 10 : 100;
	} else if (lat) {
		*iters = sz > LARGE ? 1000 : 10000;
		*skip = sz > LARGE ? 10 : 100;
	} else {
		*iters = sz > LARGE ? 20 : 100;
		*skip = sz > LARGE ? 2 : 10;
	}
	if (iterations > 0)
		*iters = iterations;
	if (warmup >= 0)
		*skip = warmup;
}

static void header(const char *title, const char *col) {
	if (rank == 0 && !json) {
		printf("# %s (MPI, %d ranks)\n%-10s%20s\n", title, size, "# Size", col);
		fflush(stdout);
	}
}

static void row(const char *bench, long sz, const char *key, double v) {
	if (rank != 0)
		return;
	if (json)
		printf("{\"benchmark\":\"%s\",\"size\":%ld,\"%s\":%.3f,\"ranks\":%d}\n", bench, sz, key, v, size);
	else
		printf("%-10ld%20.2f\n", sz, v);
	fflush(stdout);
}

static char *buffer(long n) {
	char *b = NULL;
	if (posix_memalign((void **)&b, 4096, n ? n : 1) != 0) {
		fprintf(stderr, "out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(b, 'a', n ? n : 1);
	return b;
}

static void latency(void) {
	char *s = buffer(max_size), *r = buffer(max_size);
	header("Latency Test", "Latency (us)");
	for (long sz = min_size; sz <= max_size; sz = sz ? sz * 2 : 1) {
		int iters, skip;
		double t0 = 0;
		counts(sz, 1, 0, &iters, &skip);
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank > 1)
			continue;
		for (int i = 0; i < iters + skip; i++) {
			if (i == skip)
				t0 = MPI_Wtime();
			if (rank == 0) {
				MPI_Send(s, sz, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
				MPI_Recv(r, sz, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(r, sz, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(s, sz, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
			}
		}
		row("latency", sz, "latency_us", (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
	}
	free(s);
	free(r);
}

static void bandwidth(int bi) {
	char *s = buffer(max_size), *r = buffer(max_size);
	MPI_Request req[2 * WINDOW];
	header(bi ? "Bi-Directional Bandwidth Test" : "Bandwidth Test", "Bandwidth (MB/s)");
	for (long sz = min_size ? min_size : 1; sz <= max_size; sz *= 2) {
		int iters, skip;
		double t0 = 0;
		counts(sz, 0, 0, &iters, &skip);
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank > 1)
			continue;
		int peer = 1 - rank;
		for (int i = 0; i < iters + skip; i++) {
			if (i == skip)
				t0 = MPI_Wtime();
			if (bi) {
				for (int j = 0; j < WINDOW; j++)
					MPI_Irecv(r, sz, MPI_CHAR, peer, 10, MPI_COMM_WORLD, &req[WINDOW + j]);
				for (int j = 0; j < WINDOW; j++)
					MPI_Isend(s, sz, MPI_CHAR, peer, 10, MPI_COMM_WORLD, &req[j]);
				MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
			} else if (rank == 0) {
				for (int j = 0; j < WINDOW; j++)
					MPI_Isend(s, sz, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[j]);
				MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
				MPI_Recv(r, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				for (int j = 0; j < WINDOW; j++)
					MPI_Irecv(r, sz, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[j]);
				MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
				MPI_Send(s, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
			}
		}
		double t = MPI_Wtime() - t0;
		row(bi ? "bibw" : "bw", sz, "mb_per_s", (bi ? 2.0 : 1.0) * sz / 1e6 * iters * WINDOW / t);
	}
	free(s);
	free(r);
}

static void a2a(void) {
	char *s = buffer(max_size), *r = buffer(max_size * (long)size);
	MPI_Request *req = malloc(2 * size * sizeof(MPI_Request));
	header("All-to-All Personalized Exchange Latency Test", "Avg Latency(us)");
	for (long sz = min_size; sz <= max_size; sz = sz ? sz * 2 : 1) {
		int iters, skip;
		double t0 = 0;
		counts(sz, 0, 1, &iters, &skip);
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < iters + skip; i++) {
			if (i == skip)
				t0 = MPI_Wtime();
			int n = 0;
			for (int j = 1; j < size; j++) {
				int p = (rank + size - j) % size;
				MPI_Irecv(r + p * sz, sz, MPI_CHAR, p, 20, MPI_COMM_WORLD, &req[n++]);
			}
			for (int j = 1; j < size; j++) {
				int p = (rank + j) % size;
				MPI_Isend(s, sz, MPI_CHAR, p, 20, MPI_COMM_WORLD, &req[n++]);
			}
			MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
		}
		double t = (MPI_Wtime() - t0) * 1e6 / iters, sum = 0;
		MPI_Reduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		row("a2a", sz, "latency_us", sum / size);
	}
	free(req);
	free(s);
	free(r);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *what = argc > 1 ? argv[1] : "latency";
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--min-size") && i + 1 < argc)
			min_size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
			iterations = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
			warmup = atoi(argv[++i]);
		else {
			if (rank == 0)
				fprintf(stderr, "osu: unknown argument %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (size < 2 || min_size < 0 || max_size < min_size) {
		if (rank == 0)
			fprintf(stderr, "osu: need 2 or more ranks and sizes 0 <= min <= max\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (!strcmp(what, "latency"))
		latency();
	else if (!strcmp(what, "bw"))
		bandwidth(0);
	else if (!strcmp(what, "bibw"))
		bandwidth(1);
	else if (!strcmp(what, "a2a"))
		a2a();
	else {
		if (rank == 0)
			fprintf(stderr, "osu: unknown benchmark %s (latency, bw, bibw, a2a)\n", what);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Finalize();
	return 0;
}
