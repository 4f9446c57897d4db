/*
 * taskgrad base layer: the GPT-2 model definition, as llm.c lays it out.
 *
 * The configuration (maxT, V, L, NH, C, Vp), the 16 parameter tensors in
 * llm.c's order with their names and shapes, and the GPT-2 initialisation:
 * plain data, no StarPU.  The file formats that store a model (llmc.h,
 * safetensors.h) and the training graph (gpt.h) build on it; it was part of
 * llmc.h, which still includes it.
 *
 * The tensors, with L = num_layers, C = channels, Vp = padded_vocab_size:
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C),
 *   qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w (L, C),
 *   ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
 *   fcprojb (L, C), lnfw (C), lnfb (C).
 */
#ifndef TASKGRAD_GPT_MODEL_H
#define TASKGRAD_GPT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TG_GPT_NPARAMS 16

typedef struct tg_gpt_config {
  int max_seq_len;        /* maxT */
  int vocab_size;         /* V */
  int num_layers;         /* L */
  int num_heads;          /* NH */
  int channels;           /* C */
  int padded_vocab_size;  /* Vp >= V */
} tg_gpt_config;

/* The parameter tensors, in llm.c's order. */
typedef enum tg_gpt_param {
  TG_WTE, TG_WPE, TG_LN1W, TG_LN1B, TG_QKVW, TG_QKVB, TG_ATTPROJW, TG_ATTPROJB,
  TG_LN2W, TG_LN2B, TG_FCW, TG_FCB, TG_FCPROJW, TG_FCPROJB, TG_LNFW, TG_LNFB
} tg_gpt_param;

extern const char *const tg_gpt_param_names[TG_GPT_NPARAMS];

/* -EINVAL with a message unless the configuration is valid. */
int tg_gpt_config_check(const tg_gpt_config *c);
/* Element counts of the 16 tensors; returns their sum. */
size_t tg_gpt_param_sizes(const tg_gpt_config *c, size_t sizes[TG_GPT_NPARAMS]);
/* The (rows, cols) shape of one layer's slice of a tensor as the graph uses
 * it: e.g. qkvw -> (3C, C), qkvb -> (1, 3C), wte -> (Vp, C), lnfw -> (1, C).
 * For the per-layer tensors, L such slices lie one after the other. */
void tg_gpt_param_shape(const tg_gpt_config *c, tg_gpt_param p, int *rows,
                        int *cols);
/* 1 for the tensors with an L dimension (ln1w .. fcprojb) */
int tg_gpt_param_per_layer(tg_gpt_param p);
/* The slices tensor p is stored in (L for a per-layer tensor, else 1) and,
 * in *slice_floats, the floats of each: the pieces that checkpoints and
 * model files are streamed in. */
int tg_gpt_param_slices(const tg_gpt_config *c, tg_gpt_param p, size_t *slice_floats);
/* The floats of the largest slice of any tensor (a streaming buffer). */
size_t tg_gpt_largest_slice(const tg_gpt_config *c);
/* Where tensor p starts in llm.c's layout, in floats. */
size_t tg_gpt_param_offset(const tg_gpt_config *c, tg_gpt_param p);

/* GPT-2 initialisation: normal(0, 0.02) for wte, wpe and the linear
 * weights, with attprojw and fcprojw scaled by 1/sqrt(2L); LayerNorm weights
 * 1; biases 0.  params holds tg_gpt_param_sizes() floats, laid out as in the
 * file.  Deterministic for a seed. */
void tg_gpt_init_params(const tg_gpt_config *c, uint64_t seed, float *params);
/* The same values, elements [off, off + n) of tensor `param` only (its
 * place in the file's layout), bit for bit: a model initialised piece by
 * piece (tg_gpt_create_from) never needs a second whole copy.  Out-of-range
 * arguments write nothing. */
void tg_gpt_init_param_range(const tg_gpt_config *c, uint64_t seed, int param, size_t off,
                             size_t n, float *dst);

#ifdef __cplusplus
}
#endif
#endif
