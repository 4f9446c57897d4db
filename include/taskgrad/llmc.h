/*
 * llm.c file formats and GPT-2 parameters.
 *
 * Model checkpoints (GPT-2 format version 3, fp32): a header of 256 int32
 * (magic 20240326, version 3, maxT, V, L, NH, C, Vp, the rest 0), then the
 * 16 parameter tensors in llm.c's order, raw float32, little-endian:
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C),
 *   qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w (L, C),
 *   ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C), fcprojw (L, C, 4C),
 *   fcprojb (L, C), lnfw (C), lnfb (C).
 * Token files: a header of 256 int32 (magic 20240520, version 1, number of
 * tokens, the rest 0), then the tokens as uint16.
 *
 * Readers validate magic, version, header values (positive, C divisible by
 * NH, V <= Vp, sizes that do not overflow), that the file size equals what
 * the header announces, and token values (< V); on bad input they return
 * -EINVAL (or -errno) with a message naming the file in tg_last_error().
 * Writers write a temporary file in the same directory, fsync it, and
 * rename it over the target, so a crash never leaves a half-written file.
 */
#ifndef TASKGRAD_LLMC_H
#define TASKGRAD_LLMC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TG_LLMC_MODEL_MAGIC 20240326
#define TG_LLMC_MODEL_VERSION 3
#define TG_LLMC_TOKENS_MAGIC 20240520
#define TG_LLMC_TOKENS_VERSION 1
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

/* GPT-2 initialisation: normal(0, 0.02) for wte, wpe and the linear
 * weights, with attprojw and fcprojw scaled by 1/sqrt(2L); LayerNorm weights
 * 1; biases 0.  params holds tg_gpt_param_sizes() floats, laid out as in the
 * file.  Deterministic for a seed. */
void tg_gpt_init_params(const tg_gpt_config *c, uint64_t seed, float *params);

/* Reads a checkpoint: *params is malloc'd (the caller frees it). */
int tg_llmc_model_read(const char *path, tg_gpt_config *cfg, float **params);
int tg_llmc_model_write(const char *path, const tg_gpt_config *cfg,
                        const float *params);

/* Reads a token file; vocab_size > 0 makes every token < vocab_size a
 * requirement.  *tokens is malloc'd. */
int tg_llmc_tokens_read(const char *path, int vocab_size, uint16_t **tokens,
                        size_t *ntokens);
int tg_llmc_tokens_write(const char *path, const uint16_t *tokens, size_t n);

#ifdef __cplusplus
}
#endif
#endif
