/*
 * taskgrad layer 1: causal attention on cuDNN's fused scaled-dot-product
 * attention (SDPA), forward and backward, through the cuDNN frontend's C++
 * graph API (issue 51 item 1).  Compiled only when CMake finds the
 * frontend's headers (scripts/fetch-cudnn-frontend), with TG_HAVE_CUDNN;
 * attention_cudnn_stub.c stands in otherwise.
 *
 * Design note
 * -----------
 * Loading: libtaskgrad does not link libcudnn.  The frontend is compiled
 * with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, which resolves every cuDNN
 * call with dlsym on cudnn_frontend::cudnn_dlhandle; the first call here
 * sets it with dlopen("libcudnn.so.9").  A library that cannot be loaded,
 * a handle that cannot be created, a graph that fails validate,
 * build_operation_graph, create_execution_plans, check_support or
 * build_plans, or a plan wanting more workspace than the scratch holds:
 * each returns cudaErrorNotSupported with the reason and nothing queued,
 * and the caller runs the gemm kind's kernels (attention_sdpa.c).  The
 * frontend throws too (a missing symbol): every entry catches everything,
 * as nothing may unwind into C.
 *
 * Layout, without copies: qkv (b T, ldqkv) holds per row q | k | v, head h
 * at columns h hs; as cuDNN's (B, H, S, D) tensors Q, K and V are the
 * pointers qkv, qkv + C, qkv + 2C with strides (T ldqkv, hs, ldqkv, 1);
 * out, dout and dqkv likewise with their own leading dimensions.  cuDNN
 * wants 16-byte aligned pointers and strides that are multiples of 8
 * elements: shapes without them are refused here before any graph is
 * built.  Causal mask top-left (query t sees keys <= t), scale
 * 1/sqrt(hs), intermediate and compute f32.  The statistics (Stats: lse
 * of the scaled scores, f32) are kept packed in the scratch as (b, NH, T)
 * and moved to and from taskgrad's (b T, NH) lse by
 * attention_cudnn_stats.cu, so every worker's backward reads every
 * worker's forward.  The workspace follows them in the scratch.
 *
 * Cache: building a graph costs milliseconds (heuristics, kernel
 * compilation), so each is built once per (thread's handle, direction,
 * type, b, NH, T, hs, leading dimensions) and kept with its workspace size,
 * or with the reason it was refused, under a mutex (one CUDA worker thread
 * per device, each with its own handle: graphs are not shared between
 * handles).  tg_cuda_attention_cudnn_release (tg_shutdown) frees the
 * graphs, then the handles.
 */
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "taskgrad/kernels_cuda_precision.h"
#include "scratch_sizes.h"

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; /* the frontend's dynamic loading reads it */
}

namespace {

namespace fe = cudnn_frontend;

enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

/* one graph per problem; the handle stands for the thread and device */
typedef std::tuple<cudnnHandle_t, int, int, int, int, int, int, int64_t, int64_t, int64_t,
                   int64_t>
    Key; /* handle, fwd, lowp, b, NH, T, hs, ldqkv, ldo, lddo, lddqkv */

struct Entry {
  std::shared_ptr<fe::graph::Graph> graph; /* null: refused, why says why */
  int64_t workspace = 0;
  std::string why;
};

std::mutex g_lock;
int g_loaded;              /* 0: not tried; 1: loaded; -1: failed (g_load_error) */
std::string g_load_error;
std::map<Key, Entry> g_graphs;
std::vector<cudnnHandle_t> g_handles;
thread_local cudnnHandle_t t_handle;
thread_local int t_state; /* 0: not tried; 1: t_handle; -1: none */

void say(char *why, size_t whylen, const std::string &s) {
  if (why && whylen) std::snprintf(why, whylen, "%s", s.c_str());
}

/* cuDNN loaded once per process, under g_lock */
bool load_locked(std::string &why) {
  if (g_loaded == 0) {
    dlerror();
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      g_load_error = std::string("dlopen libcudnn.so.9: ") + (e ? e : "unknown error");
      g_loaded = -1;
    } else {
      fe::cudnn_dlhandle = h;
      g_loaded = 1;
    }
  }
  if (g_loaded < 0) why = g_load_error;
  return g_loaded > 0;
}

/* this thread's handle, created at first use */
cudnnHandle_t handle_locked(std::string &why) {
  if (t_state == 0) {
    t_state = -1;
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = fe::detail::create_handle(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      why = std::string("cudnnCreate: ") + fe::detail::get_error_string(st);
    } else {
      g_handles.push_back(h);
      t_handle = h;
      t_state = 1;
    }
  } else if (t_state < 0) {
    why = "cudnnCreate failed on this thread";
  }
  return t_state > 0 ? t_handle : nullptr;
}

#define FE_TRY(call)                                                                         \
  do {                                                                                       \
    fe::error_t err_ = (call);                                                               \
    if (err_.is_bad()) {                                                                     \
      e.why = std::string(#call) + ": " + err_.get_message();                                \
      return e;                                                                              \
    }                                                                                        \
  } while (0)

std::shared_ptr<fe::graph::Tensor_attributes> bhsd(fe::graph::Graph &g, const char *name,
                                                   int64_t uid, int b, int NH, int T, int hs,
                                                   int64_t ld) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({b, NH, T, hs})
                      .set_stride({(int64_t)T * ld, hs, ld, 1}));
}

void set_bhsd(const std::shared_ptr<fe::graph::Tensor_attributes> &t, int64_t uid, int b, int NH,
              int T, int hs, int64_t ld) {
  t->set_output(true).set_uid(uid).set_dim({b, NH, T, hs}).set_stride({(int64_t)T * ld, hs, ld, 1});
}

void set_stats(const std::shared_ptr<fe::graph::Tensor_attributes> &t, int b, int NH, int T) {
  t->set_uid(UID_STATS)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({b, NH, T, 1})
      .set_stride({(int64_t)NH * T, T, 1, 1});
}

Entry build(cudnnHandle_t handle, const Key &k) {
  Entry e;
  const int fwd = std::get<1>(k), b = std::get<3>(k), NH = std::get<4>(k), T = std::get<5>(k),
            hs = std::get<6>(k);
  const int64_t ldq = std::get<7>(k), ldo = std::get<8>(k), lddo = std::get<9>(k),
                lddq = std::get<10>(k);
  const float scale = 1.0f / std::sqrt((float)hs);
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(std::get<2>(k) == TG_BF16 ? fe::DataType_t::BFLOAT16
                                                : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto Q = bhsd(*g, "Q", UID_Q, b, NH, T, hs, ldq);
  auto K = bhsd(*g, "K", UID_K, b, NH, T, hs, ldq);
  auto V = bhsd(*g, "V", UID_V, b, NH, T, hs, ldq);
  if (fwd) {
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("tg_attention_fwd")
                   .set_generate_stats(true)
                   .set_causal_mask(true)
                   .set_attn_scale(scale);
    auto [O, S] = g->sdpa(Q, K, V, opt);
    set_bhsd(O, UID_O, b, NH, T, hs, ldo);
    S->set_output(true);
    set_stats(S, b, NH, T);
  } else {
    auto O = bhsd(*g, "O", UID_O, b, NH, T, hs, ldo);
    auto dO = bhsd(*g, "dO", UID_DO, b, NH, T, hs, lddo);
    auto S = g->tensor(fe::graph::Tensor_attributes().set_name("Stats"));
    set_stats(S, b, NH, T);
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("tg_attention_bwd")
                   .set_causal_mask(true)
                   .set_attn_scale(scale);
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, S, opt);
    set_bhsd(dQ, UID_DQ, b, NH, T, hs, lddq);
    set_bhsd(dK, UID_DK, b, NH, T, hs, lddq);
    set_bhsd(dV, UID_DV, b, NH, T, hs, lddq);
  }
  FE_TRY(g->validate());
  FE_TRY(g->build_operation_graph(handle));
  FE_TRY(g->create_execution_plans({fe::HeurMode_t::A}));
  FE_TRY(g->check_support());
  FE_TRY(g->build_plans());
  FE_TRY(g->get_workspace_size(e.workspace));
  e.graph = g;
  return e;
}

/* The shape checks cuDNN's engines make, said in our words: 16-byte
 * aligned pointers, strides multiples of 8 elements, head sizes multiples
 * of 8 up to 128 (the backward's limit on Hopper) */
bool shape_ok(tg_dtype lowp, int b, int T, int C, int NH, const void *const *ptrs, int nptrs,
              const int *lds, int nlds, std::string &why) {
  char msg[160];
  if (lowp != TG_BF16 && lowp != TG_F16) {
    why = "not a 16-bit type";
    return false;
  }
  if (b < 1 || T < 1 || NH < 1 || C % NH) {
    why = "empty or uneven shape";
    return false;
  }
  const int hs = C / NH;
  if (hs % 8 || hs > 128) {
    std::snprintf(msg, sizeof msg, "head size %d: a multiple of 8 up to 128 is needed", hs);
    why = msg;
    return false;
  }
  for (int i = 0; i < nlds; i++)
    if (lds[i] % 8) {
      std::snprintf(msg, sizeof msg, "leading dimension %d not a multiple of 8", lds[i]);
      why = msg;
      return false;
    }
  for (int i = 0; i < nptrs; i++)
    if ((uintptr_t)ptrs[i] % 16) {
      why = "a buffer not 16-byte aligned";
      return false;
    }
  return true;
}

/* the graph of key k for this thread, built at first use; null with why */
std::shared_ptr<fe::graph::Graph> graph_for(Key k, int64_t &workspace, std::string &why) {
  std::lock_guard<std::mutex> lock(g_lock);
  if (!load_locked(why)) return nullptr;
  cudnnHandle_t h = handle_locked(why);
  if (!h) return nullptr;
  std::get<0>(k) = h;
  auto it = g_graphs.find(k);
  if (it == g_graphs.end()) it = g_graphs.emplace(k, build(h, k)).first;
  if (!it->second.graph) why = it->second.why;
  workspace = it->second.workspace;
  return it->second.graph;
}

cudaError_t run(bool fwd, tg_dtype lowp, int b, int T, int C, int NH, const uint16_t *qkv,
                int ldqkv, const uint16_t *out, int ldo, float *lse, const uint16_t *dout,
                int lddo, uint16_t *dqkv, int lddqkv, float *scratch, size_t scratch_floats,
                cudaStream_t stream, char *why, size_t whylen) {
  std::string reason;
  const void *ptrs[] = {qkv, out, dout ? (const void *)dout : qkv,
                        dqkv ? (const void *)dqkv : qkv, scratch};
  const int lds[] = {ldqkv, ldo, fwd ? 8 : lddo, fwd ? 8 : lddqkv};
  if (!shape_ok(lowp, b, T, C, NH, ptrs, 5, lds, 4, reason)) {
    say(why, whylen, reason);
    return cudaErrorNotSupported;
  }
  const int hs = C / NH;
  const size_t stats = tg_attn_cudnn_stats_floats(b, T, NH);
  int64_t workspace = 0;
  Key k(nullptr, fwd, (int)lowp, b, NH, T, hs, ldqkv, ldo, fwd ? 0 : lddo, fwd ? 0 : lddqkv);
  auto g = graph_for(k, workspace, reason);
  if (!g) {
    say(why, whylen, reason);
    return cudaErrorNotSupported;
  }
  if (scratch_floats < stats || (size_t)workspace > (scratch_floats - stats) * sizeof(float)) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "the plan's workspace of %lld bytes exceeds the scratch's %zu",
                  (long long)workspace,
                  scratch_floats > stats ? (scratch_floats - stats) * sizeof(float) : 0);
    say(why, whylen, msg);
    return cudaErrorNotSupported;
  }
  /* from here on work is queued: a failure is an error, not a refusal */
  cudnnHandle_t h = t_handle;
  cudnnStatus_t st = fe::detail::set_stream(h, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    say(why, whylen, std::string("attention_cudnn.cpp: cudnnSetStream: ") +
                         fe::detail::get_error_string(st));
    return cudaErrorUnknown;
  }
  float *bhs = scratch;
  void *ws = workspace ? (void *)(scratch + stats) : nullptr;
  std::unordered_map<int64_t, void *> pack = {
      {UID_Q, (void *)qkv},
      {UID_K, (void *)(qkv + C)},
      {UID_V, (void *)(qkv + 2 * C)},
      {UID_O, (void *)out},
      {UID_STATS, (void *)bhs}};
  if (!fwd) {
    pack[UID_DO] = (void *)dout;
    pack[UID_DQ] = (void *)dqkv;
    pack[UID_DK] = (void *)(dqkv + C);
    pack[UID_DV] = (void *)(dqkv + 2 * C);
    cudaError_t e = tg_cuda_attention_lse_permute(b, T, NH, lse, bhs, 1, stream);
    if (e != cudaSuccess) return e;
  }
  fe::error_t err = g->execute(h, pack, ws);
  if (err.is_bad()) {
    say(why, whylen, std::string("attention_cudnn.cpp: execute (") +
                         (fwd ? "forward" : "backward") + "): " + err.get_message());
    return cudaErrorUnknown;
  }
  if (fwd) return tg_cuda_attention_lse_permute(b, T, NH, lse, bhs, 0, stream);
  return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t tg_cuda_attention_cudnn_fwd(tg_dtype lowp, int b, int T, int C, int NH,
                                                   const uint16_t *qkv, int ldqkv, uint16_t *out,
                                                   int ldo, float *lse, float *scratch,
                                                   size_t scratch_floats, cudaStream_t stream,
                                                   char *why, size_t whylen) {
  try {
    return run(true, lowp, b, T, C, NH, qkv, ldqkv, out, ldo, lse, nullptr, 0, nullptr, 0,
               scratch, scratch_floats, stream, why, whylen);
  } catch (const std::exception &x) {
    say(why, whylen, std::string("cuDNN frontend: ") + x.what());
  } catch (...) {
    say(why, whylen, "cuDNN frontend: unknown exception");
  }
  /* a throw comes from loading, lookup or building, before execute */
  return cudaErrorNotSupported;
}

extern "C" cudaError_t tg_cuda_attention_cudnn_bwd(tg_dtype lowp, int b, int T, int C, int NH,
                                                   const uint16_t *qkv, int ldqkv,
                                                   const uint16_t *out, int ldo, const float *lse,
                                                   const uint16_t *dout, int lddo, uint16_t *dqkv,
                                                   int lddqkv, float *scratch,
                                                   size_t scratch_floats, cudaStream_t stream,
                                                   char *why, size_t whylen) {
  try {
    return run(false, lowp, b, T, C, NH, qkv, ldqkv, out, ldo, (float *)lse, dout, lddo, dqkv,
               lddqkv, scratch, scratch_floats, stream, why, whylen);
  } catch (const std::exception &x) {
    say(why, whylen, std::string("cuDNN frontend: ") + x.what());
  } catch (...) {
    say(why, whylen, "cuDNN frontend: unknown exception");
  }
  return cudaErrorNotSupported;
}

extern "C" void tg_cuda_attention_cudnn_release(void) {
  try {
    std::lock_guard<std::mutex> lock(g_lock);
    g_graphs.clear(); /* the plans before the handles they were built with */
    for (cudnnHandle_t h : g_handles) fe::detail::destroy_handle(h);
    g_handles.clear();
  } catch (...) {
  }
  /* the threads' t_state stay 1 with a destroyed handle: a worker thread
   * does not outlive tg_shutdown, and a new tg_init starts new workers */
}
