/* Two OpenSHMEM PEs (Open MPI's oshmem over UCX's rc_verbs on a simulated
 * device, in mpi_libfabric_check.py) exchange symmetric memory and check every
 * byte and value: puts and gets of 1 B to 4 MiB, fetch-add and add on one
 * counter from both PEs, compare-and-swap, a put of a flag waited for with
 * shmem_wait_until, and a sum reduction. Prints "shmem_verbs_check: PASS" on
 * PE 0 when nothing differed, else each difference, and exits 1. */
#include <shmem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char Byte(int seed, size_t i) { return (unsigned char)(seed * 131 + i * 7 + (i >> 12)); }

static long counter, swapped, flag;
static long sum_in[4], sum_out[4];
static int errors_in, errors_out;
static long sync_work[SHMEM_REDUCE_SYNC_SIZE];
static long long_work[SHMEM_REDUCE_MIN_WRKDATA_SIZE];
static int int_work[SHMEM_REDUCE_MIN_WRKDATA_SIZE];

static int CheckBytes(const char *what, size_t n, const unsigned char *p, int seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != Byte(seed, i)) {
      printf("shmem_verbs_check: %s of %zu bytes: byte %zu is %u, not %u\n", what, n, i, p[i], Byte(seed, i));
      return 1;
    }
  }
  return 0;
}

static void ResetSync(void) {
  for (int i = 0; i < SHMEM_REDUCE_SYNC_SIZE; ++i) sync_work[i] = SHMEM_SYNC_VALUE;
  shmem_barrier_all();
}

int main(void) {
  shmem_init();
  const int me = shmem_my_pe();
  if (shmem_n_pes() != 2) {
    if (me == 0) printf("shmem_verbs_check: needs 2 PEs, has %d\n", shmem_n_pes());
    shmem_global_exit(2);
  }
  const size_t kMax = (size_t)4 << 20;
  unsigned char *symmetric = shmem_malloc(kMax);
  unsigned char *local = malloc(kMax);
  int errors = 0;
  shmem_barrier_all();

  /* PE 0 puts a pattern into PE 1's memory, PE 1 checks it and writes another, PE 0 gets that. */
  for (size_t n = 1; n <= kMax; n *= 4) {
    const int seed = (int)(n % 251);
    if (me == 0) {
      for (size_t i = 0; i < n; ++i) local[i] = Byte(seed, i);
      shmem_putmem(symmetric, local, n, 1);
      shmem_quiet();
    }
    shmem_barrier_all();
    if (me == 1) {
      errors += CheckBytes("shmem_putmem", n, symmetric, seed);
      for (size_t i = 0; i < n; ++i) symmetric[i] = Byte(seed + 1, i);
    }
    shmem_barrier_all();
    if (me == 0) {
      memset(local, 0, n);
      shmem_getmem(local, symmetric, n, 1);
      errors += CheckBytes("shmem_getmem", n, local, seed + 1);
    }
    shmem_barrier_all();
  }

  /* Both PEs add 1 to PE 0's counter 1000 times, half with fetch-add. */
  for (int i = 0; i < 1000; ++i) {
    if (i & 1) {
      shmem_long_atomic_add(&counter, 1, 0);
    } else {
      (void)shmem_long_atomic_fetch_add(&counter, 1, 0);
    }
  }
  shmem_barrier_all();
  if (me == 0 && counter != 2000) {
    printf("shmem_verbs_check: the counter is %ld, not 2000\n", counter);
    ++errors;
  }
  /* PE 1 swaps PE 0's value 0 -> 42; a second swap from 0 finds 42 and changes nothing. */
  if (me == 1) {
    const long first = shmem_long_atomic_compare_swap(&swapped, 0, 42, 0);
    const long second = shmem_long_atomic_compare_swap(&swapped, 0, 43, 0);
    if (first != 0 || second != 42) {
      printf("shmem_verbs_check: compare-and-swap returned %ld and %ld, not 0 and 42\n", first, second);
      ++errors;
    }
  }
  shmem_barrier_all();
  if (me == 0 && swapped != 42) {
    printf("shmem_verbs_check: the swapped value is %ld, not 42\n", swapped);
    ++errors;
  }
  /* PE 0 puts a flag into PE 1, which waits for it. */
  if (me == 0) {
    shmem_long_p(&flag, 9, 1);
    shmem_quiet();
  } else {
    shmem_long_wait_until(&flag, SHMEM_CMP_EQ, 9);
  }
  /* The sum of both PEs' vectors. */
  for (int i = 0; i < 4; ++i) sum_in[i] = me * 10 + i;
  ResetSync();
  shmem_long_sum_to_all(sum_out, sum_in, 4, 0, 0, 2, long_work, sync_work);
  for (int i = 0; i < 4; ++i) {
    if (sum_out[i] != 10 + 2 * i) {
      printf("shmem_verbs_check: sum[%d] is %ld, not %d\n", i, sum_out[i], 10 + 2 * i);
      ++errors;
    }
  }

  errors_in = errors;
  ResetSync();
  shmem_int_sum_to_all(&errors_out, &errors_in, 1, 0, 0, 2, int_work, sync_work);
  if (me == 0) printf("shmem_verbs_check: %s (%d errors)\n", errors_out ? "FAIL" : "PASS", errors_out);
  free(local);
  shmem_free(symmetric);
  shmem_finalize();
  return errors_out ? 1 : 0;
}
