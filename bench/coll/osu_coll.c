/*
 * osu_coll.c: the collective measurements of amibench (cmd/amibench/coll.go)
 * in C over MPI, with the methodology of the OSU micro-benchmarks'
 * osu_allreduce, osu_reduce, osu_bcast, osu_allgather, osu_alltoall and
 * osu_barrier, so that bench/compare_coll.sh runs the same collectives with
 * MPICH next to amigo's package mpi.
 *
 *   mpiexec -n 2 ./osu_coll allreduce [--min-size N] [--max-size N]
 *                                    [--iterations N] [--json]
 *
 * Elements are doubles (MPI_DOUBLE), so size is in bytes and 8 doubles are
 * size 64; reductions use MPI_SUM; roots are rank 0. Each size: a barrier,
 * then warm-up and timed iterations of one call each followed by a barrier
 * (not timed); each rank averages its times; the row gives the average over
 * ranks (latency_us) and the least and largest rank averages. OSU's counts:
 * 1000 iterations and 100 warm-up up to 8 KiB, 100 and 10 above.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE 8192

static int rank, size, json;
static long min_size = 8, max_size = 4L << 20;
static int iterations;

static void run(const char *bench, long sz, double *sbuf, double *rbuf) {
	long n = sz / 8;
	int iters = sz > LARGE ? 100 : 1000, skip = sz > LARGE ? 10 : 100;
	if (iterations > 0)
		iters = iterations;
	double total = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < iters + skip; i++) {
		double t0 = MPI_Wtime();
		if (!strcmp(bench, "allreduce"))
			MPI_Allreduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		else if (!strcmp(bench, "reduce"))
			MPI_Reduce(sbuf, rbuf, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		else if (!strcmp(bench, "bcast"))
			MPI_Bcast(sbuf, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
		else if (!strcmp(bench, "allgather"))
			MPI_Allgather(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, MPI_COMM_WORLD);
		else if (!strcmp(bench, "alltoall"))
			MPI_Alltoall(sbuf, n, MPI_DOUBLE, rbuf, n, MPI_DOUBLE, MPI_COMM_WORLD);
		else
			MPI_Barrier(MPI_COMM_WORLD);
		double t1 = MPI_Wtime();
		if (i >= skip)
			total += t1 - t0;
		MPI_Barrier(MPI_COMM_WORLD);
	}
	double avg = total * 1e6 / iters, sum, lo, hi;
	MPI_Reduce(&avg, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&avg, &lo, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
	MPI_Reduce(&avg, &hi, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank != 0)
		return;
	if (json)
		printf("{\"benchmark\":\"%s\",\"size\":%ld,\"latency_us\":%.3f,\"min_latency_us\":%.3f,\"max_latency_us\":%.3f,\"ranks\":%d}\n",
		       bench, sz, sum / size, lo, hi, size);
	else
		printf("%-10ld%20.2f%20.2f%20.2f\n", sz, sum / size, lo, hi);
	fflush(stdout);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	const char *bench = argc > 1 ? argv[1] : "";
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--min-size") && i + 1 < argc)
			min_size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = atol(argv[++i]);
		else if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
			iterations = atoi(argv[++i]);
	}
	const char *known[] = {"allreduce", "reduce", "bcast", "allgather", "alltoall", "barrier"};
	int ok = 0;
	for (int i = 0; i < 6; i++)
		ok |= !strcmp(bench, known[i]);
	if (!ok) {
		if (rank == 0)
			fprintf(stderr, "usage: osu_coll allreduce|reduce|bcast|allgather|alltoall|barrier [--min-size N] [--max-size N] [--iterations N] [--json]\n");
		MPI_Finalize();
		return 2;
	}
	long per = max_size / 8 * (long)size; /* allgather and alltoall hold a block per rank */
	double *sbuf = malloc(per * 8 + 8), *rbuf = malloc(per * 8 + 8);
	for (long i = 0; i < per; i++)
		sbuf[i] = (double)(i % 1000) + rank;
	memset(rbuf, 0, per * 8);
	if (rank == 0 && !json)
		printf("# OSU MPI %s Latency Test (%d ranks)\n%-10s%20s%20s%20s\n", bench, size, "# Size", "Avg Latency(us)", "Min Latency(us)", "Max Latency(us)");
	if (!strcmp(bench, "barrier"))
		run(bench, 0, sbuf, rbuf);
	else
		for (long sz = 8; sz <= max_size; sz *= 2)
			if (sz >= min_size)
				run(bench, sz, sbuf, rbuf);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
