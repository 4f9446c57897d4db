/*
 * cuda_emu runtime: runs emulated CUDA launches on CPU threads, and the few
 * host runtime calls the launchers make (test_ops_emu only).
 *
 * Design note
 * -----------
 * - Two ways to run a block, one bookkeeping (the collectives below):
 *   fibers (default): every CUDA thread of the block is a ucontext fiber
 *     on the launching thread; a fiber runs until it waits at a collective
 *     or finishes, then the next ready fiber runs.  A switch costs well
 *     under a microsecond, so the whole test fits in its time budget on two
 *     cores.  Fibers start in decreasing thread order in even blocks and
 *     increasing order in odd ones: a thread that reads shared memory
 *     another thread writes before a barrier reads the poison (NaN) in one
 *     of the two orders when the barrier is missing.
 *   Under ThreadSanitizer, fibers too, with TSan told of every switch (a
 *     TSan fiber per CUDA thread, switches into a fiber synchronising,
 *     switches back not): only the collectives' mutexes order two CUDA
 *     threads, so a shared-memory race between two barrier phases is
 *     reported as a race between two threads.
 *   threads (TG_EMU_THREADS=1 in the environment, and always under
 *     AddressSanitizer, which does not follow ucontext stacks): one pthread
 *     per CUDA thread (small stacks, kStack), reused for every block of the
 *     launch, which meet after each block at an internal rendezvous.
 *   Blocks run one at a time in both (races between blocks are not seen;
 *   races inside a block are).  Before each block, shared memory is filled
 *   with 0xff bytes (see cuda_emu.h).
 * - Collectives.  Each warp has a mutex, a wait queue and 32 value slots;
 *   the block has its own for __syncthreads*.  A thread arriving at a
 *   collective records its value, and either completes it (the last one the
 *   collective waits for) or waits.  One mutex per warp, not per block, so
 *   that ThreadSanitizer sees no happens-before edge between warps other
 *   than the ones __syncthreads makes.
 * - Never hang.  `stuck` counts threads waiting in an unfinished collective
 *   (low 32 bits) and threads that have finished the block (high 32 bits);
 *   the completer of a collective subtracts its waiters before waking them.
 *   A thread whose increment makes blocked + finished equal the block size,
 *   with some blocked, has proved that no thread can make progress: it
 *   fails the launch and wakes everybody.  Plainly wrong uses fail at once:
 *   a thread finishing while others wait at a barrier, a barrier reached
 *   after some threads finished, two call sites meeting at one barrier,
 *   a warp mask naming lanes that do not exist or have finished.
 * - Failing: the first message is kept, every waiting thread is woken and
 *   throws Abort, which unwinds the kernel back to the thread's (or fiber's)
 *   entry; the launch then reports cudaErrorLaunchFailure through
 *   cudaGetLastError and the message through tg_emu_last_message() (also
 *   printed on stderr).
 * - Launch checks as on an H100: at most 1024 threads per block (z <= 64),
 *   grid y, z <= 65535; dynamic shared memory above 48 KiB only after
 *   cudaFuncSetAttribute(MaxDynamicSharedMemorySize), at most 227 KiB.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_THREAD__)
#define TG_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TG_EMU_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TG_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_EMU_ASAN 1
#endif
#endif

#ifdef TG_EMU_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char *file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char *file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char *file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif

__thread tg_emu_uint3 threadIdx, blockIdx, blockDim, gridDim;

/* bounds of the section holding every static __shared__ variable (weak: a
 * program may have none) */
extern "C" char __start_tg_emu_shared[] __attribute__((weak));
extern "C" char __stop_tg_emu_shared[] __attribute__((weak));

namespace tg_emu {
namespace {

constexpr size_t kStack = 256 * 1024;       /* per emulated thread */
constexpr size_t kFiberStack = 128 * 1024; /* per fiber */
constexpr size_t kSmemDefault = 48 * 1024;  /* without opt-in */
constexpr size_t kSmemOptinMax = 227 * 1024; /* H100 / H200 */
constexpr uint64_t kFinished = 1ull << 32;

struct Abort {};

bool g_fibers; /* this launch runs fibers (else threads) */
/* Fibers ready to run, a ring (fiber mode): a fiber is in it at most once,
 * so nthreads + 1 slots suffice.  Under ThreadSanitizer its accesses are
 * hidden (see ready_push): they are the emulator's scheduling, not the
 * kernel's synchronisation, and must not order the fibers. */
struct ReadyRing {
  std::vector<unsigned> slot;
  size_t head = 0, tail = 0;
  void reset(size_t cap) {
    slot.assign(cap + 1, 0);
    head = tail = 0;
  }
  bool empty() const { return head == tail; }
  void push(unsigned t) {
    slot[tail] = t;
    tail = (tail + 1) % slot.size();
  }
  unsigned pop() {
    const unsigned t = slot[head];
    head = (head + 1) % slot.size();
    return t;
  }
} g_ready;

/* Runs f with ThreadSanitizer's view of memory accesses switched off. */
template <typename F> void tsan_hidden(F f) {
#ifdef TG_EMU_TSAN
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  f();
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#else
  f();
#endif
}

/* Threads wait on a condition variable; fibers wait by giving the launching
 * thread back control until notify_all makes them ready again. */
struct WaitQueue {
  std::condition_variable cv;
  std::vector<unsigned> fibers;
  template <typename Pred> void wait(std::unique_lock<std::mutex> &lk, Pred ready);
  void notify_all() {
    if (!g_fibers) {
      cv.notify_all();
      return;
    }
    tsan_hidden([&] {
      for (unsigned t : fibers) g_ready.push(t);
    });
    fibers.clear();
  }
};

struct Warp {
  std::mutex m;
  WaitQueue cv;
  bool pending = false;
  unsigned mask = 0, arrived = 0, exited = 0, existing = 0, gen = 0;
  Site site{};
  uint64_t slot[32] = {}, result[32] = {};
};

struct Where { /* what a thread waits at, for the deadlock message */
  std::atomic<const char *> what{nullptr}, file{nullptr};
  std::atomic<int> line{0};
};

struct Pool {
  LaunchSpec spec;
  void (*body)(void *);
  void *ctx;
  unsigned nthreads = 0, nwarps = 0;
  uint64_t nblocks = 0;
  std::unique_ptr<Warp[]> warps;
  std::unique_ptr<Where[]> where;
  /* block barrier */
  std::mutex bm;
  WaitQueue bcv;
  bool bpending = false;
  unsigned barrived = 0, bexited = 0, bgen = 0;
  Site bsite{};
  int bacc = 0, bresult = 0;
  std::atomic<uint64_t> stuck{0};
  /* failure */
  std::atomic<bool> failed{false};
  std::mutex em;
  std::string message;
  /* end-of-block rendezvous */
  std::mutex dm;
  std::condition_variable dcv;
  unsigned done = 0;
  uint64_t block = 0;
  unsigned char *dyn = nullptr;
  /* fiber mode */
  std::unique_ptr<ucontext_t[]> fctx;
  ucontext_t sched;
  std::atomic<unsigned> fibers_done{0}; /* atomic: no order between fibers */
  int block_end = 0; /* TSan: fibers release it when done, the scheduler acquires */
#ifdef TG_EMU_TSAN
  void *tsan_sched = nullptr;
  std::vector<void *> tsan_fiber;
#endif
};

__thread Pool *t_pool;
__thread unsigned t_tid; /* linear thread id in the block (fiber mode: of
                            the fiber running now) */

[[noreturn]] void die(const char *what) {
  fprintf(stderr, "cuda_emu: fatal: %s: %s\n", what, strerror(errno));
  abort();
}

template <typename Pred>
void WaitQueue::wait(std::unique_lock<std::mutex> &lk, Pred ready) {
  if (!g_fibers) {
    cv.wait(lk, ready);
    return;
  }
  while (!ready()) { /* no fiber switch while a mutex is held */
    fibers.push_back(t_tid);
    const unsigned me = t_tid;
    lk.unlock();
    if (swapcontext(&t_pool->fctx[me], &t_pool->sched) != 0) die("swapcontext");
    lk.lock();
  }
}

std::mutex g_launch_mutex; /* one launch at a time */
cudaError_t g_last_error = cudaSuccess;
std::string g_last_message;
std::unordered_map<const void *, int> g_max_dyn_smem;

/* "file.cu:123" */
std::string where_str(const char *file, int line) {
  const char *base = file ? strrchr(file, '/') : nullptr;
  return std::string(base ? base + 1 : file ? file : "?") + ":" + std::to_string(line);
}

std::string site_str(const Site &s) {
  return std::string(s.what ? s.what : "?") + " (" + where_str(s.file, s.line) + ")";
}

std::string thread_str(unsigned tid) {
  const unsigned bx = blockDim.x, by = blockDim.y;
  return "thread (" + std::to_string(tid % bx) + "," + std::to_string(tid / bx % by) +
         "," + std::to_string(tid / (bx * by)) + ")";
}

/* Records the first failure, wakes every waiting thread, unwinds this one.
 * Must be called without holding any of the pool's mutexes. */
[[noreturn]] void fail(const std::string &msg) {
  Pool *p = t_pool;
  {
    std::lock_guard<std::mutex> g(p->em);
    if (!p->failed.load()) {
      p->message = msg;
      p->failed.store(true);
    }
  }
  for (unsigned w = 0; w < p->nwarps; ++w) {
    std::lock_guard<std::mutex> g(p->warps[w].m);
    p->warps[w].cv.notify_all();
  }
  {
    std::lock_guard<std::mutex> g(p->bm);
    p->bcv.notify_all();
  }
  throw Abort{};
}

void set_where(const Site *s) {
  Where &w = t_pool->where[t_tid];
  w.what.store(s ? s->what : nullptr, std::memory_order_relaxed);
  w.file.store(s ? s->file : nullptr, std::memory_order_relaxed);
  w.line.store(s ? s->line : 0, std::memory_order_relaxed);
}

/* Every thread is blocked or finished: a summary of where they are. */
std::string deadlock_message() {
  Pool *p = t_pool;
  std::string msg = "deadlock: no thread of the block can proceed:";
  unsigned i = 0;
  while (i < p->nthreads) { /* runs of threads at the same place */
    const char *what = p->where[i].what.load(std::memory_order_relaxed);
    const char *file = p->where[i].file.load(std::memory_order_relaxed);
    const int line = p->where[i].line.load(std::memory_order_relaxed);
    unsigned j = i + 1;
    while (j < p->nthreads && p->where[j].what.load(std::memory_order_relaxed) == what &&
           p->where[j].file.load(std::memory_order_relaxed) == file &&
           p->where[j].line.load(std::memory_order_relaxed) == line)
      ++j;
    msg += " threads " + std::to_string(i) + "-" + std::to_string(j - 1) + " " +
           (what ? site_str(Site{what, file, line}) : std::string("finished")) + ";";
    i = j;
  }
  return msg;
}

/* This thread is about to wait: count it, and fail if nobody can proceed. */
void block_or_fail(std::unique_lock<std::mutex> &lk, const Site &s) {
  set_where(&s);
  const uint64_t v = t_pool->stuck.fetch_add(1) + 1;
  if ((v & 0xffffffffu) + (v >> 32) == t_pool->nthreads) {
    lk.unlock();
    fail(deadlock_message());
  }
}

void thread_finished() {
  Pool *p = t_pool;
  Warp &w = p->warps[t_tid / 32];
  const unsigned bit = 1u << (t_tid % 32);
  {
    std::unique_lock<std::mutex> lk(w.m);
    w.exited |= bit;
    if (w.pending && (w.mask & bit)) {
      const std::string s = site_str(w.site);
      lk.unlock();
      fail(thread_str(t_tid) + " finished while its warp waits for it at " + s);
    }
  }
  {
    std::unique_lock<std::mutex> lk(p->bm);
    p->bexited++;
    if (p->bpending) {
      const std::string s = site_str(p->bsite) + " reached by " +
                            std::to_string(p->barrived) + " of " +
                            std::to_string(p->nthreads) + " threads";
      lk.unlock();
      fail(thread_str(t_tid) + " finished while others wait at " + s);
    }
  }
  set_where(nullptr);
  const uint64_t v = p->stuck.fetch_add(kFinished) + kFinished;
  if ((v & 0xffffffffu) != 0 && (v & 0xffffffffu) + (v >> 32) == p->nthreads)
    fail(deadlock_message());
}

void poison_shared(Pool *p) {
  const uintptr_t begin = (uintptr_t)__start_tg_emu_shared,
                  end = (uintptr_t)__stop_tg_emu_shared;
  if (begin && end > begin) memset(__start_tg_emu_shared, 0xff, end - begin);
  if (p->dyn) memset(p->dyn, 0xff, p->spec.smem);
}

void reset_block(Pool *p) {
  for (unsigned w = 0; w < p->nwarps; ++w) {
    p->warps[w].pending = false;
    p->warps[w].arrived = p->warps[w].exited = 0;
  }
  p->bpending = false;
  p->barrived = p->bexited = 0;
  p->stuck.store(0);
  poison_shared(p);
}

void *thread_main(void *arg) {
  Pool *p = static_cast<Pool *>(arg);
  t_pool = p;
  const dim3 b = p->spec.block, g = p->spec.grid;
  threadIdx = tg_emu_uint3{t_tid % b.x, t_tid / b.x % b.y, t_tid / (b.x * b.y)};
  blockDim = tg_emu_uint3{b.x, b.y, b.z};
  gridDim = tg_emu_uint3{g.x, g.y, g.z};
  for (uint64_t blk = 0; blk < p->nblocks; ++blk) {
    blockIdx = tg_emu_uint3{(unsigned)(blk % g.x), (unsigned)(blk / g.x % g.y),
                            (unsigned)(blk / ((uint64_t)g.x * g.y))};
    try {
      p->body(p->ctx);
      thread_finished();
    } catch (const Abort &) {
    }
    std::unique_lock<std::mutex> lk(p->dm);
    if (++p->done == p->nthreads) {
      p->done = 0;
      reset_block(p);
      p->block++;
      p->dcv.notify_all();
    } else {
      p->dcv.wait(lk, [&] { return p->block != blk; });
    }
    if (p->failed.load()) break; /* stable: every thread has finished */
  }
  return nullptr;
}

/* ---- fiber mode ---- */

void fiber_entry() {
  Pool *p = t_pool;
  try {
    p->body(p->ctx);
    thread_finished();
  } catch (const Abort &) {
  }
  p->fibers_done++;
#ifdef TG_EMU_TSAN
  __tsan_release(&p->block_end); /* the end of the kernel for this thread */
#endif
} /* returns to uc_link: the scheduler */

/* Fiber mode: the launching thread's thread-local index variables are the
 * running fiber's; hidden from TSan, to which each fiber is a thread that
 * reads them while the scheduler rewrites them for the next one. */
void set_thread_index(unsigned tid) {
  const dim3 b = t_pool->spec.block;
  tsan_hidden([&] {
    t_tid = tid;
    threadIdx = tg_emu_uint3{tid % b.x, tid / b.x % b.y, tid / (b.x * b.y)};
  });
}

/* a function of its own: getcontext returns twice, like setjmp */
void init_fiber(Pool &p, unsigned t, char *stack) {
  ucontext_t &c = p.fctx[t];
  if (getcontext(&c) != 0) die("getcontext");
  c.uc_stack.ss_sp = stack;
  c.uc_stack.ss_size = kFiberStack;
  c.uc_link = &p.sched;
  makecontext(&c, fiber_entry, 0);
}

/* Runs fiber t until it waits or finishes.  ThreadSanitizer is told of both
 * switches here, on the scheduler's side: into the fiber with
 * synchronisation (the fiber sees the scheduler's writes: its thread
 * index, the launch's arguments), back without, so that nothing orders two
 * fibers but the collectives' mutexes, as for real threads. */
void resume(Pool &p, unsigned t) {
  set_thread_index(t);
  /* everything read before the switch: between the two TSan switches, TSan
   * counts accesses as the fiber's */
  ucontext_t *const sched = &p.sched, *const fiber = &p.fctx[t];
#ifdef TG_EMU_TSAN
  void *const tsan_sched = p.tsan_sched;
  __tsan_switch_to_fiber(p.tsan_fiber[t], 0);
#endif
  const int rc = swapcontext(sched, fiber);
#ifdef TG_EMU_TSAN
  __tsan_switch_to_fiber(tsan_sched, __tsan_switch_to_fiber_no_sync);
#endif
  if (rc != 0) die("swapcontext");
}

void run_fibers(Pool &p) {
  std::unique_ptr<char[]> stacks(new char[kFiberStack * p.nthreads]);
  p.fctx.reset(new ucontext_t[p.nthreads]);
  t_pool = &p;
#ifdef TG_EMU_TSAN
  p.tsan_sched = __tsan_get_current_fiber();
  for (unsigned t = 0; t < p.nthreads; ++t) p.tsan_fiber.push_back(__tsan_create_fiber(0));
#endif
  const dim3 b = p.spec.block, g = p.spec.grid;
  blockDim = tg_emu_uint3{b.x, b.y, b.z};
  gridDim = tg_emu_uint3{g.x, g.y, g.z};
  for (uint64_t blk = 0; blk < p.nblocks && !p.failed.load(); ++blk) {
    tsan_hidden([&] {
      blockIdx = tg_emu_uint3{(unsigned)(blk % g.x), (unsigned)(blk / g.x % g.y),
                              (unsigned)(blk / ((uint64_t)g.x * g.y))};
    });
    g_ready.reset(p.nthreads);
    p.fibers_done.store(0);
    for (unsigned i = 0; i < p.nthreads; ++i) {
      const unsigned t = blk % 2 ? i : p.nthreads - 1 - i; /* start order */
      init_fiber(p, t, stacks.get() + kFiberStack * t);
      g_ready.push(t);
    }
    for (;;) { /* FIFO */
      bool empty = false;
      unsigned t = 0;
      tsan_hidden([&] {
        empty = g_ready.empty();
        if (!empty) t = g_ready.pop();
      });
      if (empty) break;
      resume(p, t);
    }
#ifdef TG_EMU_TSAN
    __tsan_acquire(&p.block_end);
#endif
    if (p.fibers_done != p.nthreads && !p.failed.load()) { /* cannot happen */
      fprintf(stderr, "cuda_emu: fatal: %u fibers left waiting\n",
              p.nthreads - p.fibers_done.load());
      abort();
    }
    p.block = blk + 1;
    reset_block(&p);
  }
#ifdef TG_EMU_TSAN
  for (void *f : p.tsan_fiber) __tsan_destroy_fiber(f);
#endif
  t_pool = nullptr;
}

/* ---- thread mode ---- */

struct ThreadArg {
  Pool *pool;
  unsigned tid;
};

void *thread_start(void *arg) {
  ThreadArg a = *static_cast<ThreadArg *>(arg);
  delete static_cast<ThreadArg *>(arg);
  t_tid = a.tid;
  return thread_main(a.pool);
}

void run_threads(Pool &p, const std::string &who) {
  pthread_attr_t attr;
  int rc = pthread_attr_init(&attr);
  if (rc == 0) rc = pthread_attr_setstacksize(&attr, kStack);
  if (rc != 0) {
    fprintf(stderr, "cuda_emu: fatal: %s: pthread_attr: %s\n", who.c_str(), strerror(rc));
    abort();
  }
  std::unique_ptr<pthread_t[]> threads(new pthread_t[p.nthreads]);
  unsigned started = 0;
  for (; started < p.nthreads; ++started) {
    rc = pthread_create(&threads[started], &attr, thread_start, new ThreadArg{&p, started});
    if (rc != 0) break;
  }
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    /* the started threads wait for the missing ones at the first block's
     * end forever: nothing sensible can be done but stop */
    fprintf(stderr, "cuda_emu: error: %s: pthread_create: %s\n", who.c_str(), strerror(rc));
    abort();
  }
  for (unsigned t = 0; t < p.nthreads; ++t) {
    rc = pthread_join(threads[t], nullptr);
    if (rc != 0) {
      fprintf(stderr, "cuda_emu: error: pthread_join: %s\n", strerror(rc));
      abort();
    }
  }
}

int g_force_threads = -1; /* tg_emu_use_threads(); -1: decide here */

/* Threads under AddressSanitizer (it does not follow ucontext stacks), when
 * asked for, or when forced by the test; fibers otherwise, ThreadSanitizer
 * included (told of every switch, see resume()). */
bool use_threads() {
#ifdef TG_EMU_ASAN
  return true;
#endif
  if (g_force_threads >= 0) return g_force_threads != 0;
  const char *e = getenv("TG_EMU_THREADS");
  return e && *e && strcmp(e, "0") != 0;
}

cudaError_t launch_error(cudaError_t e, const std::string &msg) {
  g_last_error = e;
  g_last_message = msg;
  fprintf(stderr, "cuda_emu: error: %s\n", msg.c_str());
  return e;
}

} // namespace

unsigned lane_id() { return t_tid % 32; }

void *dynamic_smem() { return t_pool ? t_pool->dyn : nullptr; }

cudaError_t set_max_dynamic_smem(const void *kernel, int bytes) {
  if (bytes < 0 || (size_t)bytes > kSmemOptinMax) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> g(g_launch_mutex);
  g_max_dyn_smem[kernel] = bytes;
  return cudaSuccess;
}

void warp_collective(const Site &s, unsigned mask, uint64_t mine, uint64_t *all) {
  Pool *p = t_pool;
  Warp &w = p->warps[t_tid / 32];
  const unsigned lane = t_tid % 32, bit = 1u << lane;
  std::unique_lock<std::mutex> lk(w.m);
  std::string err;
  if (p->failed.load()) {
    lk.unlock();
    throw Abort{};
  }
  if (!(mask & bit))
    err = "lane " + std::to_string(lane) + " calls " + site_str(s) +
          " with a mask that leaves it out";
  else if (mask & ~w.existing)
    err = site_str(s) + ": mask names lanes that the block does not have (blockDim " +
          std::to_string(p->nthreads) + ")";
  else if (mask & w.exited)
    err = site_str(s) + ": mask names lanes that have finished";
  else if (w.pending && (w.mask != mask || w.site.line != s.line || w.site.file != s.file))
    err = "lanes of warp " + std::to_string(t_tid / 32) + " at different collectives: " +
          site_str(w.site) + " and " + site_str(s);
  if (!err.empty()) {
    lk.unlock();
    fail(err);
  }
  if (!w.pending) {
    w.pending = true;
    w.mask = mask;
    w.site = s;
    w.arrived = 0;
  }
  w.slot[lane] = mine;
  w.arrived |= bit;
  if (w.arrived == mask) { /* complete: publish, release the waiters */
    memcpy(w.result, w.slot, sizeof w.result);
    memcpy(all, w.result, sizeof w.result);
    w.pending = false;
    w.gen++;
    p->stuck.fetch_sub((uint64_t)(__builtin_popcount(mask) - 1));
    w.cv.notify_all();
    return;
  }
  const unsigned gen = w.gen;
  block_or_fail(lk, s);
  w.cv.wait(lk, [&] { return w.gen != gen || p->failed.load(); });
  if (w.gen == gen) {
    lk.unlock();
    throw Abort{};
  }
  memcpy(all, w.result, sizeof w.result);
}

unsigned ballot(const Site &s, unsigned mask, int pred) {
  uint64_t all[32];
  warp_collective(s, mask, pred ? 1u : 0u, all);
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && all[l]) r |= 1u << l;
  return r;
}

void syncwarp(const Site &s, unsigned mask) {
  uint64_t all[32];
  warp_collective(s, mask, 0, all);
}

int block_collective(const Site &s, BlockOp op, int pred) {
  Pool *p = t_pool;
  std::unique_lock<std::mutex> lk(p->bm);
  std::string err;
  if (p->failed.load()) {
    lk.unlock();
    throw Abort{};
  }
  if (p->bexited)
    err = thread_str(t_tid) + " reached " + site_str(s) + " after " +
          std::to_string(p->bexited) + " of " + std::to_string(p->nthreads) +
          " threads of its block finished";
  else if (p->bpending && (p->bsite.line != s.line || p->bsite.file != s.file))
    err = "divergent barriers: " + site_str(p->bsite) + " and " + site_str(s) +
          " in the same block";
  if (!err.empty()) {
    lk.unlock();
    fail(err);
  }
  if (!p->bpending) {
    p->bpending = true;
    p->bsite = s;
    p->barrived = 0;
    p->bacc = op == AND ? 1 : 0;
  }
  p->barrived++;
  if (op == OR) p->bacc |= pred;
  else if (op == AND) p->bacc &= pred;
  else if (op == COUNT) p->bacc += pred;
  if (p->barrived == p->nthreads) {
    p->bresult = p->bacc;
    p->bpending = false;
    p->bgen++;
    p->stuck.fetch_sub(p->nthreads - 1);
    p->bcv.notify_all();
    return p->bresult;
  }
  const unsigned gen = p->bgen;
  block_or_fail(lk, s);
  p->bcv.wait(lk, [&] { return p->bgen != gen || p->failed.load(); });
  if (p->bgen == gen) {
    lk.unlock();
    throw Abort{};
  }
  return p->bresult;
}

cudaError_t run(const LaunchSpec &spec, void (*body)(void *), void *ctx) {
  std::lock_guard<std::mutex> g(g_launch_mutex);
  const std::string who = std::string("kernel ") + spec.name + " launched at " +
                          where_str(spec.file, spec.line);
  const dim3 b = spec.block, gr = spec.grid;
  const uint64_t nthreads = (uint64_t)b.x * b.y * b.z;
  if (nthreads == 0 || nthreads > 1024 || b.z > 64 || gr.x == 0 || gr.y == 0 ||
      gr.z == 0 || gr.x > 0x7fffffffu || gr.y > 65535 || gr.z > 65535)
    return launch_error(cudaErrorInvalidConfiguration,
                        who + ": invalid configuration grid (" + std::to_string(gr.x) +
                            "," + std::to_string(gr.y) + "," + std::to_string(gr.z) +
                            ") block (" + std::to_string(b.x) + "," +
                            std::to_string(b.y) + "," + std::to_string(b.z) + ")");
  size_t smem_max = kSmemDefault;
  auto it = g_max_dyn_smem.find(spec.kernel);
  if (it != g_max_dyn_smem.end() && (size_t)it->second > smem_max) smem_max = it->second;
  if (spec.smem > smem_max)
    return launch_error(cudaErrorInvalidValue,
                        who + ": " + std::to_string(spec.smem) +
                            " bytes of dynamic shared memory, more than the " +
                            std::to_string(smem_max) + " allowed for it");

  Pool p;
  p.spec = spec;
  p.body = body;
  p.ctx = ctx;
  p.nthreads = (unsigned)nthreads;
  p.nwarps = (p.nthreads + 31) / 32;
  p.nblocks = (uint64_t)gr.x * gr.y * gr.z;
  p.warps.reset(new Warp[p.nwarps]);
  p.where.reset(new Where[p.nthreads]);
  for (unsigned w = 0; w < p.nwarps; ++w) {
    const unsigned lanes = p.nthreads - 32 * w < 32 ? p.nthreads - 32 * w : 32;
    p.warps[w].existing = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  std::unique_ptr<unsigned char[]> dyn(spec.smem ? new unsigned char[spec.smem] : nullptr);
  p.dyn = dyn.get();
  poison_shared(&p);

  g_fibers = !use_threads();
  if (g_fibers) {
    run_fibers(p);
  } else {
    run_threads(p, who);
  }
  if (p.failed.load()) {
    const unsigned long long blk = p.block - 1; /* the block that failed */
    return launch_error(cudaErrorLaunchFailure,
                        who + ", block " + std::to_string(blk) + ": " + p.message);
  }
  return cudaSuccess;
}

} // namespace tg_emu

/* ---- host runtime calls -------------------------------------------------- */

extern "C" cudaError_t tg_emu_cudaGetLastError(void) {
  const cudaError_t e = tg_emu::g_last_error;
  tg_emu::g_last_error = cudaSuccess;
  return e;
}

extern "C" cudaError_t tg_emu_cudaPeekAtLastError(void) { return tg_emu::g_last_error; }

extern "C" const char *tg_emu_cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorNotSupported: return "operation not supported";
  default: return "unknown error";
  }
}

extern "C" const char *tg_emu_last_message(void) { return tg_emu::g_last_message.c_str(); }

extern "C" void tg_emu_use_threads(int on) { tg_emu::g_force_threads = on; }

extern "C" void tg_emu_reset(void) {
  tg_emu::g_last_error = cudaSuccess;
  tg_emu::g_last_message.clear();
}

extern "C" cudaError_t tg_emu_cudaMemsetAsync(void *dst, int value, size_t bytes,
                                             cudaStream_t stream) {
  (void)stream;
  if (bytes && !dst) return cudaErrorInvalidValue;
  if (bytes) memset(dst, value, bytes);
  return cudaSuccess;
}

extern "C" cudaError_t tg_emu_cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               cudaMemcpyKind kind, cudaStream_t stream) {
  (void)stream;
  (void)kind;
  /* the runtime's checks: a row may not be wider than either pitch */
  if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
  if (height && width && (!dst || !src)) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  return cudaSuccess;
}
