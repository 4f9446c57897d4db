/*
 * llm.c file formats (the GPT-2 model itself: gpt_model.h).
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

#include "taskgrad/gpt_model.h" /* the model these files hold */

#ifdef __cplusplus
extern "C" {
#endif

#define TG_LLMC_MODEL_MAGIC 20240326
#define TG_LLMC_MODEL_VERSION 3
#define TG_LLMC_TOKENS_MAGIC 20240520
#define TG_LLMC_TOKENS_VERSION 1

/* Reads a checkpoint: *params is malloc'd (the caller frees it).  Both
 * readers also take a Hugging Face GPT-2 (a .safetensors file with
 * config.json beside it, or a folder of model.safetensors and config.json;
 * taskgrad/safetensors.h). */
int tg_llmc_model_read(const char *path, tg_gpt_config *cfg, float **params);
/* The same checkpoint read piece by piece: open checks the file as
 * tg_llmc_model_read does (header, configuration, size) and gives its
 * configuration; fill reads elements [off, off + n) of tensor `param`
 * (tg_gpt_param) into dst, with tg_gpt_create_from's source signature, so
 * that a model is read straight into its own buffers; close frees. */
typedef struct tg_llmc_model_reader tg_llmc_model_reader;
int tg_llmc_model_open(const char *path, tg_gpt_config *cfg, tg_llmc_model_reader **reader);
int tg_llmc_model_fill(void *reader, int param, size_t off, float *dst, size_t n);
int tg_llmc_model_close(tg_llmc_model_reader *reader);
int tg_llmc_model_write(const char *path, const tg_gpt_config *cfg,
                        const float *params);
/* The same written piece by piece, so that the model is never copied whole:
 * get(ctx, param, off, dst, n) fills dst with elements [off, off + n) of
 * tensor `param` (tg_gpt_param, llm.c's layout), called once per layer's
 * slice of a per-layer tensor (tg_gpt_param_per_layer) and once per global
 * tensor, in the file's order. */
typedef int (*tg_llmc_param_get)(void *ctx, int param, size_t off, float *dst, size_t n);
int tg_llmc_model_write_from(const char *path, const tg_gpt_config *cfg, tg_llmc_param_get get,
                             void *ctx);
/* The tg_llmc_param_get of a whole parameter array in memory: ctx points to
 * {const float *params, const tg_gpt_config *cfg}. */
int tg_llmc_array_get(void *ctx, int param, size_t off, float *dst, size_t n);

/* Reads a token file; vocab_size > 0 makes every token < vocab_size a
 * requirement.  *tokens is malloc'd. */
int tg_llmc_tokens_read(const char *path, int vocab_size, uint16_t **tokens,
                        size_t *ntokens);
int tg_llmc_tokens_write(const char *path, const uint16_t *tokens, size_t n);

#ifdef __cplusplus
}
#endif
#endif
