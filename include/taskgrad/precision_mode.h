/*
 * taskgrad mixed precision, base layer: the training precision (names,
 * its 16-bit storage type, cuBLAS's TF32 mode) and the dynamic loss scaler
 * (src/precision_mode.c, src/runtime.c): host state, no codelet.
 */
#ifndef TASKGRAD_PRECISION_MODE_H
#define TASKGRAD_PRECISION_MODE_H

#include "taskgrad/dtype.h"
#include "taskgrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tg_precision {
  TG_PREC_FP32 = 0, /* everything f32 */
  TG_PREC_TF32 = 1, /* f32 tensors; cuBLAS TF32 tensor-core math for f32 GEMMs */
  TG_PREC_BF16 = 2, /* bf16 GEMM operands and activations, f32 master weights */
  TG_PREC_FP16 = 3, /* fp16 likewise, with dynamic loss scaling by default */
} tg_precision;

/* "fp32", "tf32", "bf16", "fp16" -> *p; -EINVAL with a message otherwise */
int tg_precision_parse(const char *name, tg_precision *p);
const char *tg_precision_name(tg_precision p);
/* the 16-bit storage type of a precision: TG_BF16, TG_F16, or TG_F32 (none) */
tg_dtype tg_precision_lowp(tg_precision p);

/* Sets cuBLAS's math mode on every CUDA worker's handle: TF32 tensor-core
 * math for f32 GEMMs when on, the default mode otherwise.  Nothing to do
 * without CUDA workers.  Call after tg_init.  Worth turning on for bf16 and
 * fp16 training too: the f32 GEMMs that the low-precision adapter runs on
 * widened 16-bit operands lose nothing to TF32's 10-bit mantissa (only
 * their f32 operands, such as the softmax's gradient, get rounded), and
 * `taskgrad --precision bf16|fp16` does so. */
int tg_set_tf32(int on);

/* Dynamic loss scaling.  The loss is multiplied by `scale` before the
 * backward pass (the classifier multiplies its gradients); after every step
 * the host reads the overflow flag of that step (tg_nonfinite_insert):
 * overflow -> the optimizer skipped the step, scale halves, the clean count
 * restarts; otherwise after `window` clean steps in a row the scale doubles.
 * The scale never drops below 2^-24 nor doubles past 2^126 (f32's range). */
typedef struct tg_loss_scaler {
  int enabled;       /* 0: scale stays 1, no checks */
  float scale;       /* current loss scale S */
  int window;        /* clean steps before S doubles */
  int clean;         /* clean steps since the last change */
  long skipped;      /* steps skipped because of an overflow */
} tg_loss_scaler;

#define TG_LOSS_SCALE_DEFAULT 65536.0f /* 2^16, fp16's usual start */
#define TG_LOSS_SCALE_WINDOW 2000

/* -EINVAL when enabled and scale is not positive and finite, or window < 1 */
int tg_loss_scaler_init(tg_loss_scaler *s, int enabled, float scale, int window);
/* after a step: overflow != 0 when the step's flag was set */
void tg_loss_scaler_update(tg_loss_scaler *s, int overflow);
/* After a step's optimizer tasks were submitted: reads the step's overflow
 * flag ((1, 1) f32; waits for the step: the next step's scale depends on
 * it) and updates the scaler.  1 when the step was skipped, 0 when it was
 * applied or the scaler is off, a negative errno when the read failed. */
int tg_loss_scaler_after_step(tg_loss_scaler *s, tg_tensor *flag);

#ifdef __cplusplus
}
#endif
#endif
