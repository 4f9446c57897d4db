/*
 * test_emulated_precision: the cases of test_cuda_precision.c with an emulated
 * accelerator (a PoCL OpenCL device, --emulated-devices) in place of the
 * CUDA worker; every output must equal the CPU worker's bit for bit (see
 * tests/cuda_pair.h, TG_PAIR_OPENCL).  SKIP (77) without PoCL.
 */
#define TG_PAIR_OPENCL 1
#include "test_cuda_precision.c"
