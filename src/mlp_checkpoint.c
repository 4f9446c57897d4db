/*
 * MLP training checkpoints (include/taskgrad/checkpoint.h): everything
 * `taskgrad train mlp` needs to continue a run bitwise where it stopped.
 *
 * File format, version 1: <dir>/mlp-checkpoint.bin, little-endian.
 *
 *   Header, 256 bytes:
 *     off  type     field
 *       0  u32      magic 0x434D4754 ("TGMC")
 *       4  u32      version (1)
 *       8  u32      header size in bytes (256)
 *      12  u32      number of tensor records (2 L x 3 for AdamW, 2 L x 2 SGD)
 *      16  i32      layers L (1 .. 16)
 *      20  i32[17]  widths[0 .. L] (inputs .. classes), the rest 0
 *      88  i32      activation (tg_activation)
 *      92  i32      optimizer (tg_optimizer_kind: 0 AdamW, 1 SGD)
 *      96  i32      precision (tg_precision)
 *     100  i32      tiles (1: untiled)
 *     104  i32      batch (samples per step)
 *     108  i32      shuffled (1) or in order (0)
 *     112  i32      training samples (the data set the position counts in)
 *     116  i32      batches per epoch (the position's epoch length)
 *     120  u64      seed (initialisation and shuffling)
 *     128  i64      optimizer steps (AdamW's bias-correction t)
 *     136  i64      data position: training batches consumed (epoch =
 *                   position / batches per epoch, the batch within it the rest)
 *     144  i32      loss scaling on (1) or off (0)
 *     148  f32      loss scale
 *     152  i32      loss-scale window
 *     156  u32      0
 *     160  i64      clean steps since the last scale change
 *     168  i64      skipped steps
 *     176  f32      running epoch: sum of the batches' mean losses
 *     180  f32      running epoch: correct predictions
 *     184  i32      running epoch: batches in those sums
 *     188  i32      running epoch: samples in those sums
 *     192  u8[60]   0
 *     252  u32      CRC32 (zlib) of bytes 0 .. 251
 *
 *   Then for each layer l, its weight W (out, in) then its bias b (out):
 *   records (src/checkpoint_io.h) with index 2 l (W) or 2 l + 1 (b) and kind
 *   0 parameters (f32 masters), 1 AdamW m or SGD velocity, 2 AdamW v (AdamW
 *   only).  The file size is therefore 256 + 24 R + 4 K N for R records, K
 *   kinds and N parameters.
 *
 * The loader checks magic, version, header size and CRC (checkpoint_io.c),
 * then the header's values, the file size, and every record's index, kind,
 * count and CRC; a disagreement is -EINVAL with a message naming the file
 * and the problem.  Whether the checkpoint fits the flags of a run is the
 * caller's business (cli/train_mlp.c).  Saving goes through atomic_file.h:
 * a crash leaves the previous checkpoint or the new one.
 */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "checkpoint_io.h"
#include "taskgrad/checkpoint.h"

enum { HDR = 256 };
static const char *const kind_names[3] = {"parameters", "optimizer state 1 (m or velocity)",
                                          "optimizer state 2 (v)"};

/* 3 kinds for AdamW (optimizer 0), 2 for SGD */
static int kinds(const tg_mlp_checkpoint *c) { return c->optimizer == 0 ? 3 : 2; }

static int check_shape(const tg_mlp_checkpoint *c) {
  if (c->nlayers < 1 || c->nlayers > TG_MLP_CHECKPOINT_MAX_LAYERS)
    return tg_fail(EINVAL, "MLP checkpoint: %d layers (1 .. %d)", c->nlayers,
                   TG_MLP_CHECKPOINT_MAX_LAYERS);
  for (int l = 0; l <= c->nlayers; l++)
    if (c->widths[l] < 1 || c->widths[l] > (1 << 24))
      return tg_fail(EINVAL, "MLP checkpoint: width %d of layer boundary %d", c->widths[l], l);
  if (c->optimizer != 0 && c->optimizer != 1)
    return tg_fail(EINVAL, "MLP checkpoint: optimizer %d is neither AdamW (0) nor SGD (1)",
                   c->optimizer);
  return 0;
}

size_t tg_mlp_checkpoint_numel(const tg_mlp_checkpoint *c) {
  size_t n = 0;
  for (int l = 0; l < c->nlayers; l++)
    n += ((size_t)c->widths[l] + 1) * (size_t)c->widths[l + 1];
  return n;
}

int tg_mlp_checkpoint_alloc(tg_mlp_checkpoint *c) {
  c->params = c->state1 = c->state2 = NULL;
  TG_TRY(check_shape(c));
  float **const arrays[3] = {&c->params, &c->state1, &c->state2};
  return tg_ck_calloc(arrays, kinds(c), tg_mlp_checkpoint_numel(c));
}

void tg_mlp_checkpoint_free(tg_mlp_checkpoint *c) {
  if (!c) return;
  float **const arrays[3] = {&c->params, &c->state1, &c->state2};
  tg_ck_free(arrays, 3);
}

static void encode_header(unsigned char h[HDR], const tg_mlp_checkpoint *c) {
  memset(h, 0, HDR);
  uint32_t u[4] = {TG_MLP_CHECKPOINT_MAGIC, TG_MLP_CHECKPOINT_VERSION, HDR,
                   (uint32_t)(2 * c->nlayers * kinds(c))};
  tg_ck_put(h, 0, u, sizeof u);
  int32_t L = c->nlayers, w[TG_MLP_CHECKPOINT_MAX_LAYERS + 1] = {0};
  for (int l = 0; l <= c->nlayers; l++) w[l] = c->widths[l];
  tg_ck_put(h, 16, &L, 4);
  tg_ck_put(h, 20, w, sizeof w);
  int32_t ints[8] = {c->activation, c->optimizer, c->precision, c->tiles,
                     c->batch,      c->shuffled,  c->samples,   c->batches_per_epoch};
  tg_ck_put(h, 88, ints, sizeof ints);
  tg_ck_put(h, 120, &c->seed, 8);
  int64_t pos[2] = {c->step, c->batches};
  tg_ck_put(h, 128, pos, sizeof pos);
  int32_t sc[2] = {c->loss_scaling, c->scaler.window};
  tg_ck_put(h, 144, &sc[0], 4);
  tg_ck_put(h, 148, &c->scaler.scale, 4);
  tg_ck_put(h, 152, &sc[1], 4);
  int64_t counts[2] = {c->scaler.clean_steps, c->scaler.skipped_steps};
  tg_ck_put(h, 160, counts, sizeof counts);
  float sums[2] = {c->loss_sum, c->correct_sum};
  int32_t metric[2] = {c->metric_batches, c->metric_samples};
  tg_ck_put(h, 176, sums, sizeof sums);
  tg_ck_put(h, 184, metric, sizeof metric);
  tg_ck_seal_header(h, HDR);
}

static void decode_header(const unsigned char h[HDR], tg_mlp_checkpoint *c) {
  int32_t L, w[TG_MLP_CHECKPOINT_MAX_LAYERS + 1], ints[8], sc[2], metric[2];
  int64_t pos[2], counts[2];
  float sums[2];
  tg_ck_get(h, 16, &L, 4);
  tg_ck_get(h, 20, w, sizeof w);
  tg_ck_get(h, 88, ints, sizeof ints);
  tg_ck_get(h, 120, &c->seed, 8);
  tg_ck_get(h, 128, pos, sizeof pos);
  tg_ck_get(h, 144, &sc[0], 4);
  tg_ck_get(h, 148, &c->scaler.scale, 4);
  tg_ck_get(h, 152, &sc[1], 4);
  tg_ck_get(h, 160, counts, sizeof counts);
  tg_ck_get(h, 176, sums, sizeof sums);
  tg_ck_get(h, 184, metric, sizeof metric);
  c->nlayers = L;
  for (int l = 0; l <= TG_MLP_CHECKPOINT_MAX_LAYERS; l++) c->widths[l] = w[l];
  int *dst[8] = {&c->activation, &c->optimizer, &c->precision, &c->tiles, &c->batch,
                 &c->shuffled, &c->samples, &c->batches_per_epoch};
  for (int i = 0; i < 8; i++) *dst[i] = ints[i];
  c->step = pos[0];
  c->batches = pos[1];
  c->loss_scaling = sc[0];
  c->scaler.window = sc[1];
  c->scaler.clean_steps = counts[0];
  c->scaler.skipped_steps = counts[1];
  c->loss_sum = sums[0];
  c->correct_sum = sums[1];
  c->metric_batches = metric[0];
  c->metric_samples = metric[1];
}

/* The header's values, beyond the shape: -EINVAL naming the first bad one. */
static int check_values(const tg_mlp_checkpoint *c, const char *path) {
  struct {
    const char *name;
    long long v, lo, hi;
  } f[] = {
      {.name = "activation", .v = c->activation, .lo = 0, .hi = 15},
      {.name = "precision", .v = c->precision, .lo = 0, .hi = 15},
      {.name = "tiles", .v = c->tiles, .lo = 1, .hi = 1 << 16},
      {.name = "batch", .v = c->batch, .lo = 1, .hi = 1 << 30},
      {.name = "shuffled", .v = c->shuffled, .lo = 0, .hi = 1},
      {.name = "training samples", .v = c->samples, .lo = 1, .hi = 1LL << 31},
      {.name = "batches per epoch", .v = c->batches_per_epoch, .lo = 1, .hi = 1LL << 31},
      {.name = "optimizer steps", .v = c->step, .lo = 0, .hi = 1LL << 31},
      {.name = "batches consumed", .v = c->batches, .lo = 0, .hi = 1LL << 62},
      {.name = "loss scaling", .v = c->loss_scaling, .lo = 0, .hi = 1},
      {.name = "loss-scale window", .v = c->scaler.window, .lo = 0, .hi = 1 << 30},
      {.name = "clean steps", .v = c->scaler.clean_steps, .lo = 0, .hi = 1LL << 62},
      {.name = "skipped steps", .v = c->scaler.skipped_steps, .lo = 0, .hi = 1LL << 62},
      {.name = "metric batches", .v = c->metric_batches, .lo = 0, .hi = 1 << 30},
      {.name = "metric samples", .v = c->metric_samples, .lo = 0, .hi = 1 << 30},
  };
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].v < f[i].lo || f[i].v > f[i].hi)
      return tg_fail(EINVAL, "%s: bad header value: %s %lld (%lld .. %lld)", path, f[i].name,
                     f[i].v, f[i].lo, f[i].hi);
  return 0;
}

/* Calls fn on every record in file order: index, kind, data, count. */
typedef int (*record_fn)(void *ctx, uint32_t index, uint32_t kind, float *data, size_t count);

static int each_record(const tg_mlp_checkpoint *c, record_fn fn, void *ctx) {
  float *arrays[3] = {c->params, c->state1, c->state2};
  size_t off = 0;
  for (int l = 0; l < c->nlayers; l++)
    for (int k = 0; k < 2; k++) { /* W (out, in), then b (out) */
      size_t count = (size_t)c->widths[l + 1] * (k ? 1 : (size_t)c->widths[l]);
      for (int kind = 0; kind < kinds(c); kind++)
        TG_TRY(fn(ctx, (uint32_t)(2 * l + k), (uint32_t)kind, arrays[kind] + off, count));
      off += count;
    }
  return 0;
}

static int save_record(void *ctx, uint32_t index, uint32_t kind, float *data, size_t count) {
  return tg_ck_write_record(ctx, index, kind, data, count);
}

int tg_mlp_checkpoint_save(const char *dir, const tg_mlp_checkpoint *c) {
  if (!dir || !c || !c->params || !c->state1 || (kinds(c) == 3 && !c->state2))
    return tg_fail(EINVAL, "tg_mlp_checkpoint_save: NULL argument or array");
  TG_TRY(check_shape(c));
  char *path = tg_ck_join(dir, TG_MLP_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "MLP checkpoint: out of memory");
  unsigned char h[HDR];
  encode_header(h, c);
  tg_atomic_file af;
  int rc = tg_atomic_open(&af, path);
  if (rc == 0) {
    rc = tg_atomic_write(&af, h, HDR);
    if (rc == 0) rc = each_record(c, save_record, &af);
    if (rc == 0) rc = tg_atomic_commit(&af);
    else tg_atomic_abort(&af);
  }
  free(path);
  return rc;
}

typedef struct load_ctx {
  FILE *f;
  const char *path;
} load_ctx;

static int load_record(void *arg, uint32_t index, uint32_t kind, float *data, size_t count) {
  load_ctx *x = arg;
  char what[96];
  snprintf(what, sizeof what, "layer %u %s (%s)", index / 2, index % 2 ? "bias" : "weight",
           kind_names[kind]);
  return tg_ck_read_record(x->f, x->path, what, index, kind, data, count);
}

static int load_file(const char *path, tg_mlp_checkpoint *c) {
  unsigned char h[HDR];
  FILE *f;
  long long fsize;
  TG_TRY(tg_ck_open(path, "taskgrad MLP checkpoint", TG_MLP_CHECKPOINT_MAGIC,
                    TG_MLP_CHECKPOINT_VERSION, h, HDR, &f, &fsize));
  decode_header(h, c);
  uint32_t nrec;
  tg_ck_get(h, 12, &nrec, 4);
  int rc = check_shape(c);
  if (rc < 0) rc = tg_fail(EINVAL, "%s: %s", path, tg_last_error());
  if (rc == 0) rc = check_values(c, path);
  if (rc == 0 && nrec != (uint32_t)(2 * c->nlayers * kinds(c)))
    rc = tg_fail(EINVAL, "%s: %u tensor records, expected %d", path, nrec,
                 2 * c->nlayers * kinds(c));
  long long want = HDR + (long long)nrec * TG_CK_RECORD +
                   4LL * kinds(c) * (long long)tg_mlp_checkpoint_numel(c);
  if (rc == 0 && fsize != want)
    rc = tg_fail(EINVAL, "%s: %lld bytes, but its %d layers need %lld: %s", path, fsize,
                 c->nlayers, want, fsize < want ? "truncated" : "trailing data");
  if (rc == 0) rc = tg_mlp_checkpoint_alloc(c);
  load_ctx x = {.f = f, .path = path};
  if (rc == 0 && (rc = each_record(c, load_record, &x)) < 0) tg_mlp_checkpoint_free(c);
  fclose(f);
  return rc;
}

int tg_mlp_checkpoint_load(const char *dir, tg_mlp_checkpoint *c) {
  if (!dir || !c) return tg_fail(EINVAL, "tg_mlp_checkpoint_load: NULL argument");
  memset(c, 0, sizeof *c);
  char *path = tg_ck_join(dir, TG_MLP_CHECKPOINT_FILE);
  if (!path) return tg_fail(ENOMEM, "MLP checkpoint: out of memory");
  int rc = load_file(path, c);
  free(path);
  return rc;
}

int tg_mlp_checkpoint_exists(const char *dir) { return tg_ck_exists(dir, TG_MLP_CHECKPOINT_FILE); }
