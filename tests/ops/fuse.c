/*
 * Row fused (codelets/fuse.c): tasks gathered between tg_fuse_begin and
 * tg_fuse_end and submitted as one task of tg_fused_cl.
 *  cpu, cuda, device  a chain of four tasks on a temporary released inside
 *            the group (T = A + B; T *= 0.5; Y = T + A; Y *= -2: a buffer
 *            written first, one read and written, the hold on releases)
 *            fused, on the pair engine's two workers; on the CPU workers
 *            also against the same four tasks unfused, bit for bit (the
 *            parts' functions are the unfused tasks' own);
 *            The same chain on A and B as views of one packed tensor
 *            (tg_tensor_pack: at offsets inside its buffer), fused and
 *            unfused (each task then a fused task of one part), bit for
 *            bit the plain tensors' results;
 *  cpu       a view written (Y a view, its neighbours kept) and read back;
 *            a view as a STARPU_REDUX target refused (an error, its
 *            contents kept: StarPU never sees a view);
 *            a group of one task, and a group dropped by tg_fuse_end(0),
 *            which must leave its output as it was; the errors of
 *            unbalanced calls.
 * 33 x 257: remainder tiles in every element-wise kernel.
 */

#include "pair.h"

enum { FUSE_N = 33, FUSE_C = 257 };

/* the chain, fused when fuse is set */
static int fuse_chain(const gctx *c, const tg_task_opts *o, tg_tensor *out, int fuse) {
  tg_tensor t; /* (n, C) */
  if (tg_tensor_temp(&t, FUSE_N, FUSE_C, TG_F32)) return -1;
  if (fuse && tg_fuse_begin()) return -1;
  int rc = tg_residual_insert(c->h[0], c->h[1], t.handle, o);
  if (!rc) rc = tg_scale_insert(t.handle, 0.5f, o);
  if (!rc) rc = tg_residual_insert(t.handle, c->h[0], out[0].handle, o);
  tg_tensor_release(&t); /* held until the group is submitted */
  if (!rc) rc = tg_scale_insert(out[0].handle, -2.0f, o);
  if (fuse) {
    int end = tg_fuse_end(rc == 0);
    if (!rc) rc = end;
  }
  return rc;
}

static int fused(const void *v, const tg_task_opts *o, tg_tensor *out) {
  return fuse_chain(v, o, out, 1);
}
static int unfused(const void *v, const tg_task_opts *o, tg_tensor *out) {
  return fuse_chain(v, o, out, 0);
}

/* a group of one task, submitted as it is */
static int fused_single(const void *v, const tg_task_opts *o, tg_tensor *out) {
  const gctx *c = v;
  if (tg_fuse_begin()) return -1;
  int rc = tg_residual_insert(c->h[0], c->h[1], out[0].handle, o);
  int end = tg_fuse_end(rc == 0);
  return rc ? rc : end;
}

static void pair_fused(void) {
  float *a = rnd((size_t)FUSE_N * FUSE_C, 1), *b = rnd((size_t)FUSE_N * FUSE_C, 1);
  tg_tensor A, B;
  new_tensor(&A, FUSE_N, FUSE_C, a);
  new_tensor(&B, FUSE_N, FUSE_C, b);
  gctx c = {.h = {A.handle, B.handle}, .accum = TG_OVERWRITE};
  outspec o = {.name = "Y", .rows = FUSE_N, .cols = FUSE_C, .init = NULL, .tol = PAIR_EXACT};
  float *f_cpu = NULL, *f_2nd = NULL;
  run_pair("fused chain", fused, &c, 1, &o, &f_cpu, &f_2nd);
  if (ops_current_backend() == OPS_CPU) {
    float *u_cpu = NULL, *u_2nd = NULL;
    run_pair("unfused chain", unfused, &c, 1, &o, &u_cpu, &u_2nd);
    if (f_cpu && u_cpu)
      pair_compare("fused against unfused (CPU worker)", u_cpu, f_cpu,
                   (size_t)FUSE_N * FUSE_C, PAIR_EXACT);
    if (f_2nd && u_2nd)
      pair_compare("fused against unfused (second worker)", u_2nd, f_2nd,
                   (size_t)FUSE_N * FUSE_C, PAIR_EXACT);
    free(u_cpu);
    free(u_2nd);
    run_pair("fused group of one task", fused_single, &c, 1, &o, NULL, NULL);
  }
  /* A and B as views of one pack, after a small one: offsets in the
   * buffer that the views' interfaces must add */
  tg_tensor P, S, VA, VB, D;
  tg_tensor *parts[4] = {&S, &VA, &VB, &D};
  const int prow[4] = {3, FUSE_N, FUSE_N, 1}, pcol[4] = {5, FUSE_C, FUSE_C, FUSE_C};
  const tg_dtype pdt[4] = {TG_F32, TG_F32, TG_F32, TG_F32};
  CHECK(tg_tensor_pack(&P, 4, parts, prow, pcol, pdt) == 0, "tg_tensor_pack failed");
  CHECK(tg_tensor_write(&VA, a) == 0 && tg_tensor_write(&VB, b) == 0, "writing views failed");
  gctx cv = {.h = {VA.handle, VB.handle}, .accum = TG_OVERWRITE};
  const char *kinds[2] = {"fused chain on views", "unfused chain on views"};
  for (int k = 0; k < 2; k++) {
    float *v_cpu = NULL, *v_2nd = NULL;
    run_pair(kinds[k], k ? unfused : fused, &cv, 1, &o, &v_cpu, &v_2nd);
    if (f_cpu && v_cpu)
      pair_compare(kinds[k], f_cpu, v_cpu, (size_t)FUSE_N * FUSE_C, PAIR_EXACT);
    if (f_2nd && v_2nd)
      pair_compare(kinds[k], f_2nd, v_2nd, (size_t)FUSE_N * FUSE_C, PAIR_EXACT);
    free(v_cpu);
    free(v_2nd);
  }
  if (ops_current_backend() == OPS_CPU) {
    /* VB = VA + VA on views: B's range changes, the small one's does not */
    float *s0 = filled(15, 7.0f);
    CHECK(tg_tensor_write(&S, s0) == 0, "writing a view failed");
    CHECK(tg_residual_insert(VA.handle, VA.handle, VB.handle, NULL) == 0, "insert on views failed");
    float *y = xmalloc((size_t)FUSE_N * FUSE_C * sizeof *y), *want = xmalloc((size_t)FUSE_N * FUSE_C * sizeof *want);
    float s1[15];
    CHECK(tg_tensor_read(&VB, y) == 0 && tg_tensor_read(&S, s1) == 0, "reading views failed");
    for (size_t i = 0; i < (size_t)FUSE_N * FUSE_C; i++) want[i] = a[i] + a[i];
    pair_compare("a view written, read back", want, y, (size_t)FUSE_N * FUSE_C, PAIR_EXACT);
    pair_compare("its neighbour in the pack kept", s0, s1, 15, PAIR_EXACT);
    /* a reduction into a view cannot be a fused task: refused */
    float *d0 = filled(FUSE_C, 5.0f), *d1 = xmalloc(FUSE_C * sizeof *d1);
    CHECK(tg_tensor_write(&D, d0) == 0, "writing a view failed");
    CHECK(tg_bias_grad_insert(VA.handle, D.handle, TG_REDUCE, NULL) != 0,
          "a STARPU_REDUX access to a view was accepted");
    starpu_task_wait_for_all();
    CHECK(tg_tensor_read(&D, d1) == 0, "reading a view failed");
    pair_compare("a refused reduction leaves its view", d0, d1, FUSE_C, PAIR_EXACT);
    free(d0);
    free(d1);
    free(y);
    free(want);
    free(s0);
  }
  tg_tensor_free(&S);
  tg_tensor_free(&VA);
  tg_tensor_free(&VB);
  tg_tensor_free(&D);
  tg_tensor_free(&P);
  if (ops_current_backend() == OPS_CPU) {

    /* a dropped group: nothing runs, the output keeps its contents */
    float *init = filled((size_t)FUSE_N * FUSE_C, 3.0f);
    tg_tensor Y;
    new_tensor(&Y, FUSE_N, FUSE_C, init);
    CHECK(tg_fuse_begin() == 0, "tg_fuse_begin failed");
    CHECK(tg_fuse_begin() != 0, "a second tg_fuse_begin inside a group was accepted");
    CHECK(tg_residual_insert(A.handle, B.handle, Y.handle, NULL) == 0, "insert in a group failed");
    CHECK(tg_fuse_end(0) == 0, "tg_fuse_end(0) failed");
    CHECK(tg_fuse_end(1) != 0, "tg_fuse_end without a group was accepted");
    starpu_task_wait_for_all();
    float *y = xmalloc((size_t)FUSE_N * FUSE_C * sizeof *y);
    CHECK(tg_tensor_read(&Y, y) == 0, "reading Y failed");
    pair_compare("a dropped group leaves its output", init, y, (size_t)FUSE_N * FUSE_C,
                 PAIR_EXACT);
    free(y);
    free(init);
    tg_tensor_free(&Y);
  }
  free(f_cpu);
  free(f_2nd);
  free(a);
  free(b);
  tg_tensor_free(&A);
  tg_tensor_free(&B);
}

static const ops_row rows[] = {
    {.name = "fused",
     .doc = "several tasks as one (tg_fuse_begin / tg_fuse_end): their functions in order; "
            "a task on views of packed tensors (tg_tensor_pack) as one over their wholes",
     .buffers = "the union of its parts' (a handle once: W if written first, RW if read "
                "first and written later)",
     .covers = "tg_fused_cl",
     .kernels = "",
     .run = {[OPS_CPU] = pair_fused, [OPS_CUDA] = pair_fused, [OPS_DEVICE] = pair_fused},
     .why_not = {[OPS_REF] = "no kernel of its own: its parts' rows check theirs",
                 [OPS_CUDA_EMU] = "no CUDA launcher of its own: it calls its parts' functions",
                 [OPS_LOWP] = "its parts go through the adapter themselves, each as alone "
                              "(the GPT tests fuse bf16 blocks bit for bit)"}},
};

OPS_ROWS(rows)
