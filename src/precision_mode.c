/*
 * Training precision names and the dynamic loss scaler (host side; see
 * include/taskgrad/precision.h).  The scaler is plain host state: the
 * overflow flag is computed on the devices (tg_nonfinite_insert) and the
 * optimizer tasks skip the update there; the host reads the flag once per
 * step, after the step's optimizer tasks, to pick the next step's scale.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "taskgrad/precision_mode.h"

static const char *const tg_precision_names[] = {"fp32", "tf32", "bf16", "fp16"};

int tg_precision_parse(const char *name, tg_precision *p) {
  for (int i = 0; i < 4; i++)
    if (name && !strcmp(name, tg_precision_names[i])) {
      *p = (tg_precision)i;
      return 0;
    }
  return tg_fail(EINVAL, "unknown precision '%s' (known: fp32, tf32, bf16, fp16)",
                 name ? name : "(null)");
}

const char *tg_precision_name(tg_precision p) {
  return (unsigned)p < 4 ? tg_precision_names[p] : "?";
}

tg_dtype tg_precision_lowp(tg_precision p) {
  return p == TG_PREC_BF16 ? TG_BF16 : p == TG_PREC_FP16 ? TG_F16 : TG_F32;
}

int tg_loss_scaler_init(tg_loss_scaler *s, int enabled, float scale, int window) {
  memset(s, 0, sizeof *s);
  s->scale = 1.0f;
  s->window = window;
  s->enabled = enabled != 0;
  if (!s->enabled) return 0;
  if (!(scale > 0.0f) || isinf(scale))
    return tg_fail(EINVAL, "loss scale must be positive and finite (got %g)", scale);
  if (window < 1) return tg_fail(EINVAL, "loss-scale window must be >= 1 (got %d)", window);
  s->scale = scale;
  return 0;
}

int tg_loss_scaler_after_step(tg_loss_scaler *s, tg_tensor *flag) {
  if (!s->enabled) return 0;
  float f = 0.0f;
  TG_TRY(tg_tensor_read(flag, &f));
  tg_loss_scaler_update(s, f != 0.0f);
  return f != 0.0f;
}

void tg_loss_scaler_update(tg_loss_scaler *s, int overflow) {
  if (!s->enabled) return;
  if (overflow) {
    s->skipped++;
    s->clean = 0;
    if (s->scale > 0x1p-24f) s->scale *= 0.5f;
    return;
  }
  if (++s->clean >= s->window) {
    s->clean = 0;
    if (s->scale < 0x1p126f) s->scale *= 2.0f;
  }
}
