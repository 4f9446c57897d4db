/*
 * taskgrad data pipeline: IDX files (gzip'd or plain), the Fashion-MNIST
 * data set, and a loader thread that fills the next batch into registered
 * pinned buffers while the current training step runs.
 *
 * Readers validate everything they read (magic number, dimensions, counts,
 * file length, label range) and never read past their buffers; on bad input
 * they return -EINVAL (or -errno for system errors) with a message naming the
 * file and the problem in tg_last_error().
 */
#ifndef TASKGRAD_DATA_H
#define TASKGRAD_DATA_H

#include <stdint.h>
#include <starpu.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An IDX file of unsigned bytes: magic 0x00000801 (1-D) or 0x00000803 (3-D). */
typedef struct tg_idx {
  int ndims;       /* 1 or 3 */
  int dims[3];     /* dims[0] = number of items */
  uint8_t *data;   /* dims[0] * dims[1] * dims[2] bytes (malloc'd) */
} tg_idx;

int tg_idx_read(const char *path, tg_idx *out);
void tg_idx_free(tg_idx *idx);

/* A classification data set in memory. */
typedef struct tg_dataset {
  int n;            /* number of samples */
  int features;     /* per sample (784 for Fashion-MNIST) */
  int classes;      /* 10 for Fashion-MNIST */
  float *x;         /* (n, features), normalised */
  int32_t *y;       /* (n) in [0, classes) */
} tg_dataset;

/* Loads <dir>/{train,t10k}-images-idx3-ubyte(.gz) and the labels, checks
 * that image and label counts agree and labels are < 10, and normalises the
 * pixels to (p/255 - mean) / std with Fashion-MNIST's training mean 0.2860
 * and std 0.3530. */
int tg_fashion_mnist_load(const char *dir, int train, tg_dataset *out);
void tg_dataset_free(tg_dataset *ds);

/* The default directory of Debian's dataset-fashion-mnist package. */
#define TG_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* One batch as the training graph sees it: nmicro micro-batch handles of the
 * inputs (rows_i, features) and of the labels (rows_i, 1) int32. */
typedef struct tg_batch {
  int rows;                     /* samples in this batch */
  int nmicro;
  starpu_data_handle_t *x;      /* nmicro children */
  starpu_data_handle_t *y;      /* nmicro children */
} tg_batch;

typedef struct tg_loader_config {
  int batch;       /* samples per batch (the last batch of an epoch may be
                      smaller unless drop_last) */
  int nmicro;      /* micro-batches per batch, >= 1, <= batch */
  int prefetch;    /* batches prepared ahead of the one in use, >= 1 */
  int shuffle;     /* 1: a new seeded permutation every epoch */
  int drop_last;   /* 1: skip a final partial batch */
  uint64_t seed;
  int shard, nshards; /* nshards > 1: `batch` is the global batch and this
                         loader hands out only its part shard (0-based) of
                         nshards equal consecutive parts (data-parallel
                         ranks); batch must be a multiple of nshards and
                         nmicro at most batch / nshards.  A final partial
                         batch that does not split evenly is skipped. */
  long long start_batch; /* >= 0: the first batch handed out is batch
                            start_batch of the run, as after consuming that
                            many (resuming a checkpoint); 0 = from the start */
} tg_loader_config;

typedef struct tg_loader tg_loader;

/* Starts the loader thread.  Needs tg_init() first (buffers are pinned and
 * registered).  Returns NULL and sets tg_last_error() on failure. */
tg_loader *tg_loader_create(const tg_dataset *ds, const tg_loader_config *cfg);
/* Batches per epoch. */
int tg_loader_batches_per_epoch(const tg_loader *ld);
/* Blocks until the next batch is filled and hands it out; the batch stays
 * valid (and unwritten) until tasks submitted on it have run: the loader
 * reuses a buffer only through a StarPU write acquire, which waits for them.
 * Epochs follow one another without a break. */
int tg_loader_next(tg_loader *ld, tg_batch *out);
void tg_loader_destroy(tg_loader *ld);
/* Micro-batches the loaders have prefetched to device memory nodes (CUDA or
 * emulated OpenCL devices) since the process started. */
long tg_loader_prefetched(void);

/* GPT batches from a token array (llm.c's loader semantics).  A batch holds
 * B sequences of T tokens: inputs x (B*T, 1) and targets y (B*T, 1), int32,
 * y being x shifted by one token; both split into nmicro row blocks of whole
 * sequences (nmicro must divide B).
 *  - sequential: batch k reads tokens k*B*T .. (k+1)*B*T inclusive; when the
 *    next batch would run past the end, it starts again at token 0.
 *  - shuffled: every epoch, a seeded permutation of the windows
 *    s*T .. s*T + T (s = 0 .. (ntokens-1)/T - 1), B windows per batch.
 * The tokens must stay valid while the loader exists.  The same
 * tg_loader_next / tg_loader_batches_per_epoch / tg_loader_destroy apply. */
typedef struct tg_token_loader_config {
  int B, T;        /* sequences per batch, tokens per sequence */
  int nmicro;      /* micro-batches, dividing B */
  int prefetch;    /* batches prepared ahead, >= 1 */
  int shuffled;    /* 0: sequential, 1: shuffled windows */
  uint64_t seed;
  long long start_batch; /* >= 0: the first batch handed out is batch
                            start_batch of the run (epoch start_batch / bpe),
                            the same as after consuming start_batch batches
                            (resuming from a checkpoint); 0 = from the start */
  int shard, nshards;    /* nshards > 1: B is the global batch; this loader
                            hands out sequences shard * B/nshards ..
                            (shard+1) * B/nshards - 1 of each (nmicro then
                            divides B / nshards) */
} tg_token_loader_config;
tg_loader *tg_token_loader_create(const uint16_t *tokens, size_t ntokens,
                                  const tg_token_loader_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
