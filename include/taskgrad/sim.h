/*
 * Simulation (SimGrid build, -DTG_SIMGRID=ON; issue 13): the cost model of
 * simulated devices.  StarPU's SimGrid mode runs the real runtime and times
 * each task from its codelet's perfmodel.  taskgrad's perfmodels there take
 * a calibrated history entry (taskgrad_<op>.<host> files from a real
 * machine) when one matches the task, and otherwise a roofline: the task's
 * declared flops against the device's peak rate for its precision, its
 * buffers' bytes against the memory bandwidth, whichever is longer, plus a
 * fixed launch cost.  Roofline figures are predictions, not measurements.
 */
#ifndef TASKGRAD_SIM_H
#define TASKGRAD_SIM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Peak rates of one device of each kind (platforms/<name>.roofline). */
typedef struct tg_sim_roofline {
  double gpu_fp32;    /* FLOP/s, CUDA cores (every non-GEMM task) */
  double gpu_tf32;    /* FLOP/s, TF32 tensor cores (f32 GEMMs in tf32, bf16, fp16 runs) */
  double gpu_bf16;    /* FLOP/s, 16-bit tensor cores (GEMMs on 2-byte operands) */
  double gpu_bw;      /* bytes/s, device memory */
  double cpu_flops;   /* FLOP/s of one CPU core */
  double cpu_bw;      /* bytes/s one core gets from RAM */
  double launch_us;   /* fixed cost of every task (kernel launch, > 0:
                         StarPU's simulation refuses zero-length tasks) */
  int tensor_f32;     /* 1: f32 GEMMs use TF32 tensor cores (--precision
                         tf32, bf16, fp16) */
  /* The expected model (`simulate --cost expected`): each GPU task class at
   * a fraction of its peak above; 0 everywhere: the platform has none. */
  int expected;           /* 1: time GPU tasks with the fractions below */
  double gemm_fraction;   /* GEMMs: of their peak, at the best shape */
  double memory_fraction; /* every GPU task: of gpu_bw */
  double core_fraction;   /* non-GEMM GPU tasks: of gpu_fp32 */
  double flash_fraction;  /* the flash attention kernels (bf16 tensor cores):
                             of gpu_bf16, as measured on a GPU */
  double cudnn_fraction;  /* cuDNN's fused attention (the cudnn kind): of
                             gpu_bf16, its published rate until measured */
  double gemm_tile;       /* edge of a GEMM's output tile (wave quantization) */
  double gpu_sms;         /* streaming multiprocessors: tiles per wave */
} tg_sim_roofline;

/* 1 in a SimGrid build of taskgrad. */
int tg_sim_available(void);
/* Sets the figures used from now on; -EINVAL for a non-positive rate, or
 * with expected set, a fraction outside (0, 1] or no tile grid. */
int tg_sim_set_roofline(const tg_sim_roofline *r);
/* Tasks timed so far from calibrated history and from the roofline. */
void tg_sim_counts(long *from_history, long *from_roofline);

#ifdef __cplusplus
}
#endif
#endif
