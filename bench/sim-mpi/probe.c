/* bench/sim-mpi-probe.sh: StarPU-MPI over SMPI probe: rank 0 owns a vector, a task on rank 1 reads it
 * (an MPI transfer over the simulated network), rank 0 then reads back. */
#include <starpu.h>
#include <starpu_mpi.h>
#include <stdio.h>
static void body(void *b[], void *a) { (void)b; (void)a; }
static double cost(struct starpu_task *t, struct starpu_perfmodel_arch *a, unsigned i) {
  (void)t; (void)a; (void)i; return 100.0; }
static struct starpu_perfmodel m = {.type = STARPU_PER_ARCH, .arch_cost_function = cost};
static struct starpu_codelet cl = {.cpu_funcs = {body}, .cuda_funcs = {body}, .nbuffers = 1,
                                   .modes = {STARPU_RW}, .model = &m, .name = "probe"};
int main(int argc, char **argv) {
  int rank, size;
  if (starpu_mpi_init_conf(&argc, &argv, 1, MPI_COMM_WORLD, NULL) != 0) return 1;
  starpu_mpi_comm_rank(MPI_COMM_WORLD, &rank);
  starpu_mpi_comm_size(MPI_COMM_WORLD, &size);
  static float v[1 << 20];
  starpu_data_handle_t h;
  starpu_vector_data_register(&h, rank == 0 ? STARPU_MAIN_RAM : -1, (uintptr_t)(rank == 0 ? v : NULL), 1 << 20, sizeof(float));
  starpu_mpi_data_register(h, 42, 0);
  double t0 = starpu_timing_now();
  for (int r = 1; r < size; r++)
    if (starpu_mpi_task_insert(MPI_COMM_WORLD, &cl, STARPU_RW, h, STARPU_EXECUTE_ON_NODE, r, 0) != 0) return 2;
  starpu_task_wait_for_all();
  starpu_mpi_wait_for_all(MPI_COMM_WORLD);
  printf("rank %d of %d: done at simulated %.1f us\n", rank, size, starpu_timing_now() - t0);
  starpu_data_unregister(h);
  starpu_mpi_shutdown();
  return 0;
}
