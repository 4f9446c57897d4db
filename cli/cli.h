/*
 * Shared pieces of the taskgrad command-line tool: strict flag parsing (a bad
 * value is one clear message and exit status 2, before any work starts), the
 * progress display, and the sub-command entry points.
 */
#ifndef TASKGRAD_CLI_H
#define TASKGRAD_CLI_H

#include <signal.h>
#include <stdint.h>
#include <stdnoreturn.h>
#include <sys/types.h>

#include "taskgrad/checkpoint.h"
#include "taskgrad/gpt.h"
#include "taskgrad/llmc.h"
#include "taskgrad/mlp.h"
#include "taskgrad/precision.h"
#include "taskgrad/runtime.h"

#define TG_EXIT_USAGE 2

/* Set by the CLI when it re-executed itself with OPENBLAS_CORETYPE
 * (main.c): the kernel set OpenBLAS had picked, for `taskgrad info`. */
#define TG_BLAS_PICKED_ENV "TASKGRAD_OPENBLAS_PICKED"

/* Replaces this process with this same program run with argv (the restarts
 * and subprocesses of the CLI), keeping its name; returns only when the
 * exec failed (errno set).  Async-signal-safe: usable after fork. */
void tg_cli_exec_self(char *const argv[]);

/* Prints "taskgrad: error: ..." and exits with status 2. */
noreturn void tg_cli_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "taskgrad: error: <tg_last_error()>" and exits 2. */
noreturn void tg_cli_die_last(const char *context);

/* The value following flag argv[*i] (advancing *i), or exit 2 if missing. */
const char *tg_cli_value(int argc, char **argv, int *i);
long tg_cli_int(const char *flag, const char *text, long min, long max);
double tg_cli_double(const char *flag, const char *text, double min, double max);
uint64_t tg_cli_u64(const char *flag, const char *text);
/* "512,256" -> widths; returns the count (exit 2 on a bad list). */
int tg_cli_int_list(const char *flag, const char *text, int *out, int max, long min,
                    long max_value);
/* exit 2 unless name is a StarPU scheduling policy or one of ours */
void tg_cli_check_sched(const char *name);
/* the same, the message naming flag (e.g. "--schedulers") */
void tg_cli_check_sched_for(const char *flag, const char *name);
/* Help text of the runtime flags shared by every command. */
#define TG_CLI_RUNTIME_HELP                                                   \
  "  --sched NAME         scheduling policy: StarPU's or tg-critpath,\n"                \
  "                       tg-memaware (default: STARPU_SCHED or\n" \
  "                       StarPU's default, lws)\n"                            \
  "  --ncpus N            CPU workers (default: STARPU_NCPU or all cores,\n"   \
  "                       at most 4 beside CUDA workers when no scheduler\n"   \
  "                       is named; 0 only with devices)\n"                   \
  "  --ncuda N            CUDA workers (default: STARPU_NCUDA or all GPUs)\n"   \
  "  --calibrate          recalibrate the perfmodels (STARPU_CALIBRATE=1)\n"    \
  "  --no-priorities      give every task priority 0 (for comparisons)\n"      \
  "  --trace FILE.json    write a Chrome trace-event file (Perfetto)\n"        \
  "  --stats              print per-codelet and per-worker statistics\n"      \
  "  --deterministic      sum gradients in a fixed order (an explicit tree\n"  \
  "                       instead of StarPU reductions): bitwise-identical\n"  \
  "                       results for any scheduler, workers or MPI ranks\n"  \
  "  --emulated-devices N N emulated accelerators (0..8): PoCL CPU OpenCL\n"  \
  "                       devices, each a memory node StarPU copies data\n"   \
  "                       to and from (default: TG_EMULATED_DEVICES or 0)\n" \
  "  --gemm-lib NAME      the CPU GEMM's library: openblas, onednn, libxsmm,\n" \
  "                       or auto: the fastest per shape class, measured\n" \
  "                       once and cached (default: TG_GEMM_LIB or auto)\n"

/* taskgrad info (cli/info.c) */
int tg_cmd_info(int argc, char **argv);
/* The bench header's two lines: the CPU, the GEMM libraries and StarPU;
 * the GEMM choice of the last tg_init (cli/info.c). */
void tg_cli_machine_line(FILE *f);

/* Common runtime flags: --sched NAME, --ncpus N, --ncuda N, --calibrate.  Returns 1 if argv[*i] was
 * one of them (consumed), 0 otherwise. */
int tg_cli_runtime_flag(int argc, char **argv, int *i, tg_runtime_config *rc);
/* Exits 2 (after tg_shutdown) when STARPU_LIMIT_CPU_MEM (MiB) is set below
 * `needed` bytes: StarPU 1.3 would wait forever for memory instead of
 * failing.  `what` names the configuration for the message. */
void tg_cli_check_memory_limit(size_t needed, const char *what);
/* STARPU_LIMIT_CPU_MEM in MiB (after tg_init), SIZE_MAX when unset; bytes
 * in whole MiB, rounded up (a need of n MiB fits a limit of n). */
size_t tg_cli_cpu_mem_limit_mib(void);
size_t tg_cli_mib(size_t bytes);

/* qsort comparison of doubles, ascending */
int tg_cli_cmp_double(const void *a, const void *b);
/* Monotonic seconds. */
double tg_cli_now(void);

/* Progress display on stderr: redrawn in place on a terminal, a plain line
 * every ~10% otherwise. */
typedef struct tg_progress {
  int tty;
  int total;
  int last_decile;
  double start;
  const char *label;
  const char *unit; /* of the rate: "samples/s" unless set after begin */
  const char *extra; /* appended to each line (e.g. the loss scale), or NULL */
} tg_progress;
void tg_progress_begin(tg_progress *p, const char *label, int total);
/* acc < 0: no accuracy shown */
void tg_progress_update(tg_progress *p, int done, double loss, double acc,
                        double rate);
void tg_progress_end(tg_progress *p);

/* --trace and --stats (cli/instrument.c).  tg_cli_instrument_check, right
 * after parsing and before tg_init, plugs in the plugins the flags and the
 * environment ask for: taskgrad's own scheduling policy named by --sched
 * or STARPU_SCHED (rc->sched_policy: the runtime does not know the
 * plugins), profiling (rc->profiling) when --trace or --stats is given;
 * exit 2 unless the --trace file's directory exists and is writable.
 * tg_cli_instrument_begin, right after tg_init: starts the trace and, with
 * --stats, a statistics window.
 * tg_cli_instrument_begin_bench: the same for commands that open their own
 * statistics window (bench: their table, with its bytes-moved line, is what
 * --stats shows), trace only.  tg_cli_instrument_end, right before
 * tg_shutdown: writes the trace, prints the statistics to stderr.  These
 * three read tg_cli_instr, not rc (the flags left tg_runtime_config); rc
 * stays in their signature so that the commands call them unchanged. */
void tg_cli_instrument_check(tg_runtime_config *rc);
/* Under an MPI launcher (mpirun): sets rc->mpi, or exits 2 when this build
 * has no StarPU-MPI.  Returns 1 when the command will run distributed.
 * Commands that do not support it call tg_cli_refuse_mpi instead. */
int tg_cli_mpi_check(tg_runtime_config *rc);
/* exit 2 unless `path` can be written (an existing, writable directory;
 * not itself a directory); flag names it in the message */
void tg_cli_check_output(const char *flag, const char *path);
void tg_cli_refuse_mpi(const char *command);
/* The files a command reads and writes (cli/output_paths.c): register each
 * (NULL or empty: ignored), then tg_cli_paths_check, before any work, exits
 * 2 naming both flags when an output is another output or an input of the
 * command, compared as files (realpath; a missing file's directory
 * resolved; st_dev/st_ino for hard links), and clears the list.
 * tg_cli_path_may_replace allows one output flag to replace one input
 * flag's file (--checkpoint DIR continuing --resume DIR). */
void tg_cli_path_in(const char *flag, const char *path);
void tg_cli_path_out(const char *flag, const char *path);
/* the file `name` in directory dir (ignored when dir is NULL) */
void tg_cli_path_in_dir(const char *flag, const char *dir, const char *name);
void tg_cli_path_out_dir(const char *flag, const char *dir, const char *name);
void tg_cli_path_may_replace(const char *out_flag, const char *in_flag);
void tg_cli_paths_check(void);
/* stderr progress and summaries only on rank 0 */
int tg_cli_is_root(void);
/* --trace FILE.json and --stats: the CLI's instrumentation, not runtime
 * settings, set by tg_cli_runtime_flag (and `simulate --trace`); one
 * command runs per process, so one instance (cli/instrument.c). */
typedef struct tg_cli_instrumentation {
  const char *trace; /* Chrome trace-event JSON file to write, or NULL */
  int stats;         /* 1: print per-codelet and per-worker statistics */
} tg_cli_instrumentation;
extern tg_cli_instrumentation tg_cli_instr;
void tg_cli_instrument_begin(const tg_runtime_config *rc);
void tg_cli_instrument_begin_bench(const tg_runtime_config *rc);
void tg_cli_instrument_end(const tg_runtime_config *rc);

/* --precision fp32|tf32|bf16|fp16, --loss-scale S, --loss-scale-window N
 * (cli/precision_flags.c).  _flag consumes one of them (1) or not (0);
 * _finish, after parsing, refuses loss-scale flags without a 16-bit
 * precision and decides `dynamic` (fp16 always, bf16 when a loss-scale flag
 * was given); _start, after tg_init, sets cuBLAS's TF32 mode; _status
 * formats " scale S skipped K" for progress lines (empty without scaling). */
typedef struct tg_cli_precision {
  tg_precision precision;
  double scale;
  int window;
  int scale_given, window_given, dynamic;
} tg_cli_precision;
void tg_cli_precision_default(tg_cli_precision *p);
int tg_cli_precision_flag(int argc, char **argv, int *i, tg_cli_precision *p);
void tg_cli_precision_finish(tg_cli_precision *p);
void tg_cli_precision_start(const tg_cli_precision *p);
void tg_cli_precision_status(char *buf, size_t len, const tg_loss_scaler *s);
/* copies the precision into an MLP's configuration; exit 2 for a 16-bit
 * precision with SGD or with tiles */
void tg_cli_precision_mlp(const tg_cli_precision *p, tg_mlp_config *model,
                          const tg_optimizer_config *opt);
#define TG_CLI_PRECISION_HELP                                                 \
  "  --precision P        fp32, tf32 (TF32 tensor-core GEMMs on GPUs), bf16\n"  \
  "                       or fp16: 16-bit GEMM operands and activations,\n"    \
  "                       fp32 accumulation, master weights and AdamW state\n" \
  "                       (default fp32)\n"                                      \
  "  --loss-scale S       initial dynamic loss scale (fp16: on by default,\n"   \
  "                       65536; bf16: only when given)\n"                      \
  "  --loss-scale-window N  clean steps before the scale doubles (2000)\n"

/* Checkpoints and signals (cli/checkpoint_cli.c).  tg_cli_checkpoint_dir
 * creates the --checkpoint directory and its parents if missing, requires
 * that it can be written, exits 2 when it already holds a checkpoint
 * (exists(dir) > 0; `file` names it) unless --resume names that directory,
 * and removes the temporaries killed writers left there
 * (tg_checkpoint_remove_stale).  tg_cli_catch_signals (after tg_init, whose
 * StarPU handlers would end the process) makes the first SIGINT/SIGTERM set
 * tg_cli_signal, for each phase to stop at its next safe point (the
 * training loop after the current step); a second one ends the process (the
 * default action).  tg_cli_interrupted(phase): 0 without a signal, else
 * 128 + the signal, the exit status, after saying (rank 0) that the run
 * stopped during `phase` (NULL: silently).  tg_cli_forward_signals(child)
 * passes SIGINT/SIGTERM on to a child process the command waits for;
 * tg_cli_forward_signals(0) once it is reaped restores the default action
 * and exits 128 + the signal if one came.  tg_cli_signalled(ranks) polls
 * the flag, in agreement over MPI ranks. */
extern volatile sig_atomic_t tg_cli_signal;

/* The process's argv, set by main, for a restart of the same command. */
extern char **tg_cli_argv;
/* Stops the runtime and starts this command again from the top with
 * StarPU's clean-buffer thresholds (5 and 10, set in the environment):
 * for a step that evicts from device memory, after tg_init turned them off
 * (tg_clean_buffers_disabled).  Under mpirun, or without tg_cli_argv, it
 * returns and the run carries on as it is. */
void tg_cli_restart_with_clean_buffers(void);
void tg_cli_catch_signals(void);
void tg_cli_checkpoint_dir(const char *dir, const char *resume, const char *file,
                           int (*exists)(const char *dir));
int tg_cli_interrupted(const char *phase);
/* 1 when a signal came; with ranks > 1 on any rank (a collective: every
 * rank calls it at the same point, and all stop together, those without a
 * signal of their own as for SIGTERM) */
int tg_cli_signalled(int ranks);
void tg_cli_forward_signals(pid_t child);
/* After tg_init, for commands that write nothing worth finishing (bench,
 * simulate): SIGINT/SIGTERM end the process at once (the default action;
 * not StarPU's handler, which keeps a disposition inherited as ignored, as
 * a script's background job has it), exit status 130/143 to the shell. */
void tg_cli_end_on_signals(void);
/* The loss scaler as a checkpoint stores it (scale 1, the rest 0 when off),
 * and back into a scaler (nothing when off or saved without scaling). */
tg_loss_scaler_state tg_cli_scaler_state(const tg_loss_scaler *s);
void tg_cli_scaler_restore(tg_loss_scaler *s, const tg_loss_scaler_state *st);

int tg_cmd_train_mlp(int argc, char **argv);
int tg_cmd_bench_mlp(int argc, char **argv);
int tg_cmd_init_gpt(int argc, char **argv);
/* tg_gpt_create with the initial parameters from `params` (an llm.c-layout
 * array) when not NULL, else read piece by piece from `reader` (which it
 * closes) when not NULL, else GPT-2's random initialisation with `seed`
 * (tg_gpt_init_params' bits): the last two straight into the model's
 * buffers, never a second whole host copy (cli/init_gpt.c).  Dies with the
 * message on failure. */
void tg_cli_gpt_create(tg_gpt *g, const tg_gpt_config *cfg, const float *params,
                       tg_llmc_model_reader *reader, uint64_t seed,
                       const tg_gpt_run_config *run, const tg_optimizer_config *opt);
int tg_cmd_prepare_kjv(int argc, char **argv);
int tg_cmd_train_gpt(int argc, char **argv);
int tg_cmd_bench_gpt(int argc, char **argv);
/* bench sched: the step under each scheduling policy (cli/bench_sched.c) */
int tg_cmd_bench_sched(int argc, char **argv);
/* simulate gpt|mlp: simulated GPUs through StarPU + SimGrid (cli/simulate.c) */
int tg_cmd_simulate(int argc, char **argv);

#endif
