/*
 * GPT-2 parameters as a safetensors file, with Hugging Face's tensor names
 * and layouts (transformers' GPT2LMHeadModel state dict), so that a model
 * trained by taskgrad loads in PyTorch / transformers.
 *
 * File format (https://github.com/huggingface/safetensors): an unsigned
 * 64-bit little-endian header length N; N bytes of JSON (padded with spaces
 * so that the data starts at a multiple of 8 bytes); then the tensors' raw
 * little-endian bytes, one after the other without gaps.  The JSON maps each
 * tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [begin,
 * end]} (byte offsets relative to the start of the data), plus
 * "__metadata__": {"format": "pt"}.
 *
 * Name and layout mapping (llm.c tensor -> Hugging Face), i = 0 .. L-1:
 *   wte (Vp, C), first V rows      transformer.wte.weight          (V, C)
 *   wpe (maxT, C)                  transformer.wpe.weight          (maxT, C)
 *   ln1w[i], ln1b[i] (C)           transformer.h.i.ln_1.weight / .bias
 *   qkvw[i] (3C, C), transposed    transformer.h.i.attn.c_attn.weight (C, 3C)
 *   qkvb[i] (3C)                   transformer.h.i.attn.c_attn.bias   (3C)
 *   attprojw[i] (C, C), transposed transformer.h.i.attn.c_proj.weight (C, C)
 *   attprojb[i] (C)                transformer.h.i.attn.c_proj.bias   (C)
 *   ln2w[i], ln2b[i] (C)           transformer.h.i.ln_2.weight / .bias
 *   fcw[i] (4C, C), transposed     transformer.h.i.mlp.c_fc.weight    (C, 4C)
 *   fcb[i] (4C)                    transformer.h.i.mlp.c_fc.bias      (4C)
 *   fcprojw[i] (C, 4C), transposed transformer.h.i.mlp.c_proj.weight  (4C, C)
 *   fcprojb[i] (C)                 transformer.h.i.mlp.c_proj.bias    (C)
 *   lnfw, lnfb (C)                 transformer.ln_f.weight / .bias
 * The weights are transposed because GPT-2's linear layers are Hugging
 * Face's Conv1D, which stores (in, out) and computes x @ W + b, where llm.c
 * stores (out, in) and computes x @ W^T + b.  Only the V real rows of the
 * padded token embedding are written: Hugging Face's vocabulary has V rows
 * (the Vp - V padding rows are llm.c's, for aligned matmuls, and never reach
 * a real logit).  lm_head.weight is omitted: GPT-2 ties it to
 * transformer.wte.weight, and transformers re-ties it on loading.
 *
 * Beside the file, the GPT writers also write config.json (GPT2Config:
 * model_type "gpt2", architectures ["GPT2LMHeadModel"], n_layer, n_head,
 * n_embd, n_positions = n_ctx = maxT, vocab_size V, activation_function
 * "gelu_new", layer_norm_epsilon 1e-5, tie_word_embeddings true, dropout 0,
 * "saved_by": "taskgrad"), so that a folder holding model.safetensors and
 * it loads with GPT2LMHeadModel.from_pretrained(folder).  An existing
 * config.json is replaced only when taskgrad wrote it ("saved_by"); any
 * other is left alone and the whole save refused (-EEXIST) before anything
 * is written.
 *
 * Reading (src/hf_gpt2.c): a Hugging Face GPT-2 (GPT2LMHeadModel or
 * GPT2Model state dict, names with or without "transformer.") as a
 * safetensors file, with config.json beside it, or a folder holding
 * model.safetensors and config.json.  F32, BF16 and F16 tensors (widened
 * to f32); Conv1D weights transposed back to (out, in); V from wte, padded
 * to Vp = V rounded up to 64 with zero rows; L, C, maxT from the shapes, NH
 * from config.json (required: shapes cannot give it); lm_head.weight read
 * only if equal to wte (taskgrad ties them); the attention-mask buffers of
 * old checkpoints (h.N.attn.bias, h.N.attn.masked_bias) skipped; any other
 * name, a bad shape or dtype, a header or offset out of range, a config we
 * cannot run (activation other than gelu_new, ...) refused with -EINVAL
 * and a message naming the file.  tg_llmc_model_open reads these too.
 */
#ifndef TASKGRAD_SAFETENSORS_H
#define TASKGRAD_SAFETENSORS_H

#include "taskgrad/llmc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes params (tg_gpt_param_sizes() floats in llm.c's layout, see
 * taskgrad/llmc.h) to path as a safetensors file, and config.json beside
 * it (above).  The write is
 * atomic like tg_llmc_model_write: a temporary file in the same directory,
 * fsync, rename; a target that exists and is not a regular file is refused.
 * Returns 0, or a negative errno with a message naming the file in
 * tg_last_error(). */
int tg_safetensors_write_gpt2(const char *path, const tg_gpt_config *cfg,
                              const float *params);
/* The same from get's slices (as tg_llmc_model_write_from: one call per
 * layer's slice of a per-layer tensor, one per global tensor, here in the
 * safetensors file's order), so that a trained model is written without a
 * whole copy of it in memory: its largest slice and a transpose block. */
int tg_safetensors_write_gpt2_from(const char *path, const tg_gpt_config *cfg,
                                   tg_llmc_param_get get, void *ctx);

/* Any set of named 2-D float tensors (n of them, shapes[i] = {rows, cols},
 * row-major data[i]) as a safetensors file, atomically as above (the MLP's
 * --save: "layers.<l>.weight" (out, in), "layers.<l>.bias" (1, out)). */
int tg_safetensors_write(const char *path, int n, const char *const *names,
                         const float *const *data, const int (*shapes)[2]);

/* Hugging Face GPT-2 in (above): open checks the file (and config.json)
 * and gives the configuration; fill reads elements [off, off + n) of llm.c
 * tensor `param` (tg_gpt_param) into dst, as tg_llmc_model_fill does;
 * close frees. */
typedef struct tg_safetensors_gpt2_reader tg_safetensors_gpt2_reader;
int tg_safetensors_gpt2_open(const char *path, tg_gpt_config *cfg,
                             tg_safetensors_gpt2_reader **reader);
int tg_safetensors_gpt2_fill(void *reader, int param, size_t off, float *dst, size_t n);
int tg_safetensors_gpt2_close(tg_safetensors_gpt2_reader *reader);

/* config.json beside safetensors file st_path (above): check says whether
 * it may be written (0: absent or taskgrad's; else -EEXIST with a message),
 * write checks and writes it atomically. */
int tg_safetensors_gpt2_config_check(const char *st_path);
int tg_safetensors_gpt2_write_config(const char *st_path, const tg_gpt_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
