/*
 * Why multi-node simulations of big models fill the host's RAM
 * (bench/results/2026-11-24-sim-mpi.md): SMPI (SimGrid 3.32) gives a message
 * described by a derived datatype a private buffer of its full size, and
 * copies the payload through it, even when the datatype is contiguous.
 * StarPU-MPI 1.3 sends a matrix as one MPI_Type_vector, so every gradient
 * in flight between simulated nodes costs its size in real memory.
 *
 * Rank 0 sends 100 MB from a shared (folded) buffer to rank 1, described as
 * MPI_BYTEs ("bytes"), one MPI_Type_contiguous ("contig") or one
 * MPI_Type_vector of contiguous rows ("vector"); rank 1 prints its
 * anonymous memory before and after.  Build and run:
 *   smpicc -o dt bench/sim-mpi/datatype-copy.c
 *   printf 'node0\nnode1\n' > hf
 *   smpirun -np 2 -platform platforms/cluster-h100x8.xml -hostfile hf ./dt vector
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long anonymous_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "RssAnon:", 8)) kb = atol(line + 8);
  fclose(f);
  return kb;
}

int main(int argc, char **argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
  const char *kind = argc > 1 ? argv[1] : "bytes";
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int rows = 25000, row_bytes = 4096; /* 100 MB */
  char *buf = SMPI_SHARED_MALLOC((size_t)rows * row_bytes);
  MPI_Datatype type = MPI_BYTE;
  int count = rows * row_bytes;
  int rc = MPI_SUCCESS;
  if (!strcmp(kind, "contig")) rc = MPI_Type_contiguous(count, MPI_BYTE, &type);
  else if (!strcmp(kind, "vector")) rc = MPI_Type_vector(rows, row_bytes, row_bytes, MPI_BYTE, &type);
  else if (strcmp(kind, "bytes")) {
    fprintf(stderr, "datatype-copy: unknown kind '%s' (bytes, contig or vector)\n", kind);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (type != MPI_BYTE) {
    count = 1;
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&type);
  }
  long before = anonymous_kb();
  MPI_Request request;
  if (rc == MPI_SUCCESS)
    rc = rank == 0 ? MPI_Isend(buf, count, type, 1, 0, MPI_COMM_WORLD, &request)
                   : MPI_Irecv(buf, count, type, 0, 0, MPI_COMM_WORLD, &request);
  if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "datatype-copy: an MPI call failed (%d)\n", rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 1)
    printf("%s: receiver's anonymous memory %ld kB before, %ld kB after the message\n", kind,
           before, anonymous_kb());
  SMPI_SHARED_FREE(buf);
  MPI_Finalize();
  return 0;
}
