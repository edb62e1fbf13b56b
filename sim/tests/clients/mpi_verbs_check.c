/* Two MPI ranks exchange messages and memory through whatever the MPI library
 * picked (UCX's rc_verbs on a simulated device, in mpi_libfabric_check.py)
 * and check every byte: a ping-pong of 1 B to 4 MiB, a one-sided MPI_Put and
 * MPI_Get of 1 MiB between fences, and an MPI_Allreduce of 256 Ki doubles.
 * Prints "mpi_verbs_check: PASS" on rank 0 when nothing differed, else the
 * first difference of each part, and exits 1. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char Byte(int seed, size_t i) { return (unsigned char)(seed * 131 + i * 7 + (i >> 12)); }

static int CheckBytes(const char *what, const unsigned char *p, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != Byte(seed, i)) {
      printf("mpi_verbs_check: %s: byte %zu of %zu is %u, not %u\n", what, i, n, p[i], Byte(seed, i));
      return 1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) printf("mpi_verbs_check: needs 2 ranks, has %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t kMax = (size_t)4 << 20;
  unsigned char *buf = malloc(kMax);
  int errors = 0;

  /* Ping-pong: rank 0 sends a pattern, rank 1 checks it and answers with another. */
  for (size_t n = 1; n <= kMax; n *= 4) {
    const int seed = (int)(n % 251);
    if (rank == 0) {
      for (size_t i = 0; i < n; ++i) buf[i] = Byte(seed, i);
      MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
      memset(buf, 0, n);
      MPI_Recv(buf, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      errors += CheckBytes("ping-pong answer", buf, n, seed + 1);
    } else {
      MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      errors += CheckBytes("ping-pong message", buf, n, seed);
      for (size_t i = 0; i < n; ++i) buf[i] = Byte(seed + 1, i);
      MPI_Send(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
  }

  /* One-sided: rank 0 puts 1 MiB into rank 1's window, then gets rank 1's second MiB. */
  const size_t kWindow = (size_t)2 << 20, kHalf = kWindow / 2;
  unsigned char *window_memory = NULL;
  MPI_Win window;
  MPI_Win_allocate((MPI_Aint)kWindow, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &window_memory, &window);
  for (size_t i = 0; i < kWindow; ++i) window_memory[i] = rank == 1 ? Byte(77, i) : 0;
  MPI_Win_fence(0, window);
  if (rank == 0) {
    for (size_t i = 0; i < kHalf; ++i) buf[i] = Byte(55, i);
    MPI_Put(buf, (int)kHalf, MPI_BYTE, 1, 0, (int)kHalf, MPI_BYTE, window);
    MPI_Get(buf + kHalf, (int)kHalf, MPI_BYTE, 1, (MPI_Aint)kHalf, (int)kHalf, MPI_BYTE, window);
  }
  MPI_Win_fence(0, window);
  if (rank == 0) {
    unsigned char *expected = malloc(kHalf);
    for (size_t i = 0; i < kHalf; ++i) expected[i] = Byte(77, kHalf + i);
    if (memcmp(buf + kHalf, expected, kHalf) != 0) {
      printf("mpi_verbs_check: MPI_Get returned other bytes than rank 1's window\n");
      ++errors;
    }
    free(expected);
  } else {
    errors += CheckBytes("MPI_Put into the window", window_memory, kHalf, 55);
  }
  MPI_Win_free(&window);

  /* Allreduce: the sum of both ranks' vectors. */
  const int kDoubles = 256 * 1024;
  double *in = malloc(sizeof(double) * kDoubles), *out = malloc(sizeof(double) * kDoubles);
  for (int i = 0; i < kDoubles; ++i) in[i] = (double)(i % 1000) * (rank + 1);
  MPI_Allreduce(in, out, kDoubles, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < kDoubles; ++i) {
    if (out[i] != (double)(i % 1000) * 3) {
      printf("mpi_verbs_check: MPI_Allreduce element %d is %g, not %g\n", i, out[i], (double)(i % 1000) * 3);
      ++errors;
      break;
    }
  }

  int total = 0;
  MPI_Reduce(&errors, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("mpi_verbs_check: %s (%d errors)\n", total ? "FAIL" : "PASS", total);
  free(in);
  free(out);
  free(buf);
  MPI_Finalize();
  return total ? 1 : 0;
}
