/*
 * --precision, --loss-scale and --loss-scale-window, shared by the train
 * and bench commands (see cli.h).  fp16 turns dynamic loss scaling on by
 * default (initial scale 2^16); bf16 only when --loss-scale or
 * --loss-scale-window is given; fp32 and tf32 refuse both flags.
 */
#include <string.h>

#include "cli.h"

void tg_cli_precision_default(tg_cli_precision *p) {
  memset(p, 0, sizeof *p);
  p->precision = TG_PREC_FP32;
  p->scale = TG_LOSS_SCALE_DEFAULT;
  p->window = TG_LOSS_SCALE_WINDOW;
}

int tg_cli_precision_flag(int argc, char **argv, int *i, tg_cli_precision *p) {
  const char *a = argv[*i];
  if (!strcmp(a, "--precision")) {
    const char *v = tg_cli_value(argc, argv, i);
    if (tg_precision_parse(v, &p->precision) < 0)
      tg_cli_die("--precision: '%s' is not fp32, tf32, bf16 or fp16", v);
  } else if (!strcmp(a, "--loss-scale")) {
    p->scale = tg_cli_double(a, tg_cli_value(argc, argv, i), 1e-30, 1e38);
    p->scale_given = 1;
  } else if (!strcmp(a, "--loss-scale-window")) {
    p->window = (int)tg_cli_int(a, tg_cli_value(argc, argv, i), 1, 1 << 30);
    p->window_given = 1;
  } else {
    return 0;
  }
  return 1;
}

void tg_cli_precision_finish(tg_cli_precision *p) {
  int given = p->scale_given || p->window_given;
  if (given && !tg_precision_lowp(p->precision))
    tg_cli_die("--loss-scale and --loss-scale-window are for --precision bf16 or fp16, not %s",
               tg_precision_name(p->precision));
  p->dynamic = p->precision == TG_PREC_FP16 || given;
}

void tg_cli_precision_start(const tg_cli_precision *p) {
  /* bf16 / fp16: the f32 GEMMs that the low-precision adapter runs on
   * widened 16-bit operands lose nothing to TF32 (10 mantissa bits hold
   * every bf16 and fp16 value), so they take the tensor cores too */
  int tf32 = p->precision == TG_PREC_TF32 || tg_precision_lowp(p->precision);
  if (tg_set_tf32(tf32) < 0) tg_cli_die_last("--precision");
}

void tg_cli_precision_status(char *buf, size_t len, const tg_loss_scaler *s) {
  if (!s->enabled) {
    if (len) buf[0] = 0;
    return;
  }
  snprintf(buf, len, " scale %g skipped %ld", s->scale, s->skipped);
}

void tg_cli_precision_mlp(const tg_cli_precision *p, tg_mlp_config *model,
                          const tg_optimizer_config *opt) {
  model->amp.precision = p->precision;
  model->amp.loss_scaling = p->dynamic;
  model->amp.loss_scale = (float)p->scale;
  model->amp.loss_scale_window = p->window;
  if (!tg_precision_lowp(p->precision)) return;
  if (opt->kind != TG_OPT_ADAMW)
    tg_cli_die("--precision %s needs --optimizer adamw (fp32 master weights and moments)",
               tg_precision_name(p->precision));
  if (model->tiles > 1)
    tg_cli_die("--precision %s and --tiles %d cannot be combined yet",
               tg_precision_name(p->precision), model->tiles);
}
