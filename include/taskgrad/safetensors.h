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
 */
#ifndef TASKGRAD_SAFETENSORS_H
#define TASKGRAD_SAFETENSORS_H

#include "taskgrad/llmc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes params (tg_gpt_param_sizes() floats in llm.c's layout, see
 * taskgrad/llmc.h) to path as a safetensors file (above).  The write is
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

#ifdef __cplusplus
}
#endif
#endif
