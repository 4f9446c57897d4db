/*
 * The op table's driver: `test_ops BACKEND` runs every row's case for that
 * backend and prints one line per row (checks, failures, the largest error
 * and its tolerance, or why the row has no case there); then it checks that
 * every codelet, insert wrapper, CUDA launcher and CPU kernel declared in
 * the public headers has a row (check_complete).  `test_ops table` prints
 * the codelet table (one line per row) in Markdown.  See ops_harness.h for the backends and the rules.
 *
 * Design note
 * -----------
 * - The per-row numbers come from CHECK / CHECK_REL (redirected to
 *   ops_check / ops_note_error), so a migrated case reports without change.
 * - A case that needs a fresh StarPU per worker count calls
 *   ops_run_worker_counts(): the program re-runs itself as
 *   "child BACKEND:ROW" (tests/self_spawn.h) with STARPU_NCPU set, and the
 *   child runs only that row's case body.
 * - The headers are read at run time from TG_OPS_HEADER_DIR (set by
 *   tests/CMakeLists.txt), as test_cuda_emulated did for the launchers, so a
 *   declaration added without a row fails the next run, on every backend.
 */
#include <dirent.h>
#include <stdarg.h>

#include "ops_harness.h"
#include "ops_table.h"
#include "self_spawn.h"
#include "taskgrad/gemm_choice.h"
#include "taskgrad/runtime.h"

static const char *const g_backend_names[OPS_NBACKENDS] = {
    [OPS_REF] = "ref",           [OPS_CPU] = "cpu",       [OPS_CUDA] = "cuda",
    [OPS_CUDA_EMU] = "cuda-emu", [OPS_DEVICE] = "device", [OPS_LOWP] = "lowp"};

static ops_backend g_backend;
static int g_checks, g_failures;
/* the current row's numbers */
static int g_row_checks, g_row_failures;
static double g_row_worst_ratio, g_row_worst_err, g_row_worst_tol;
static int g_row_noted; /* errors noted (comparisons), exact or not */
static int g_row_exact; /* every noted error was an exact comparison */
static int g_child;     /* this process is a child of ops_run_worker_counts */
static const ops_row *g_row;

ops_backend ops_current_backend(void) { return g_backend; }

int ops_failures(void) { return g_failures; }

void ops_check(int ok, const char *file, int line, const char *cond, const char *fmt, ...) {
  g_checks++;
  g_row_checks++;
  if (ok) return;
  g_failures++;
  g_row_failures++;
  fprintf(stderr, "FAIL %s:%d: %s: ", file, line, cond);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void ops_note_error(double err, double tol) {
  g_row_noted++;
  if (tol >= 0) g_row_exact = 0;
  /* exact (tol < 0): any difference is an infinite ratio */
  const double ratio = tol > 0 ? err / tol : (err == 0 ? 0 : INFINITY);
  if (!(ratio <= g_row_worst_ratio)) { /* NaN sticks */
    g_row_worst_ratio = ratio;
    g_row_worst_err = err;
    g_row_worst_tol = tol > 0 ? tol : 0;
  }
}

/* ---- fresh StarPU per worker count ----------------------------------------- */

void ops_run_worker_counts(void (*body)(void)) {
  if (g_child) {
    if (tg_init(NULL) != 0) {
      CHECK(0, "tg_init: %s", tg_last_error());
      return;
    }
    printf("workers=%d\n", tg_ncpu_workers());
    body();
    tg_shutdown();
    /* the rest of the row's case is the parent's */
    printf("child: %d checks, %d failed\n", g_checks, g_failures);
    exit(g_failures ? 1 : 0);
  }
  char arg[256];
  snprintf(arg, sizeof arg, "%s:%s", g_backend_names[g_backend], g_row->name);
  for (int ncpu = 1; ncpu <= 2; ncpu++) {
    char label[320];
    snprintf(label, sizeof label, "%s on %s, %d CPU worker(s)", g_row->name,
             g_backend_names[g_backend], ncpu);
    int ok, workers = tg_test_run_self_ncpu(arg, ncpu, label, &ok);
    CHECK(ok, "%s: the child failed (see above)", label);
    CHECK(workers == ncpu, "%s: the child ran with %d CPU workers", label, workers);
  }
}

/* ---- the table: rows registered by their files ------------------------------------ */

#define MAX_FILES 64
static struct {
  const char *file;
  const ops_row *rows;
  int nrows;
} g_files[MAX_FILES];
static int g_nfiles, g_too_many_files;
static const ops_row **g_rows; /* every row, in order (ops_rows) */
static int g_nrows;

void ops_register(const char *file, const ops_row *rows, int nrows) {
  if (g_nfiles == MAX_FILES) {
    g_too_many_files = 1;
    return;
  }
  g_files[g_nfiles].file = file;
  g_files[g_nfiles].rows = rows;
  g_files[g_nfiles++].nrows = nrows;
}

static int by_file(const void *a, const void *b) {
  const char *fa = *(const char *const *)a, *fb = *(const char *const *)b;
  return strcmp(fa, fb);
}

/* the registered rows in the order of their files' names (constructors run
 * in link order, which the table does not depend on) */
static void ops_rows(void) {
  if (g_too_many_files) {
    fprintf(stderr, "test_ops: more than %d row files (MAX_FILES)\n", MAX_FILES);
    exit(1);
  }
  qsort(g_files, (size_t)g_nfiles, sizeof g_files[0], by_file);
  int n = 0;
  for (int f = 0; f < g_nfiles; f++) n += g_files[f].nrows;
  g_rows = tg_test_malloc(sizeof *g_rows * (size_t)(n ? n : 1));
  for (int f = 0; f < g_nfiles; f++)
    for (int r = 0; r < g_files[f].nrows; r++) g_rows[g_nrows++] = &g_files[f].rows[r];
}

int ops_row_is(const char *name) { return g_row && strcmp(g_row->name, name) == 0; }

static const ops_row *find_row(const char *name) {
  for (int r = 0; r < g_nrows; r++)
    if (strcmp(g_rows[r]->name, name) == 0) return g_rows[r];
  return NULL;
}

static int parse_backend(const char *s, ops_backend *b) {
  for (int i = 0; i < OPS_NBACKENDS; i++)
    if (strcmp(s, g_backend_names[i]) == 0) {
      *b = (ops_backend)i;
      return 0;
    }
  return -1;
}

static void run_row(const ops_row *row) {
  g_row = row;
  g_row_checks = g_row_failures = 0;
  g_row_worst_ratio = g_row_worst_err = g_row_worst_tol = 0;
  g_row_exact = 1;
  g_row_noted = 0;
  if (!row->run[g_backend]) {
    printf("%-22s %-8s  --  %s\n", row->name, g_backend_names[g_backend],
           row->why_not[g_backend] ? row->why_not[g_backend] : "(no reason given)");
    CHECK(row->why_not[g_backend] != NULL, "row %s: no case and no reason for %s", row->name,
          g_backend_names[g_backend]);
    return;
  }
  fflush(stdout);
  row->run[g_backend]();
  fflush(stderr);
  char errors[128];
  if (!g_row_noted)
    snprintf(errors, sizeof errors, "no measured error (pass/fail checks only)");
  else if (g_row_worst_ratio == 0)
    snprintf(errors, sizeof errors, g_row_exact ? "bit for bit" : "every error 0");
  else
    snprintf(errors, sizeof errors, "max err %.3g (tol %.1g)", g_row_worst_err, g_row_worst_tol);
  printf("%-22s %-8s  %s  %d checks, %d failed, %s\n", row->name, g_backend_names[g_backend],
         g_row_failures ? "FAIL" : "ok", g_row_checks, g_row_failures, errors);
  CHECK(g_row_checks > 0, "row %s ran no check on %s", row->name, g_backend_names[g_backend]);
}

/* ---- completeness: every declaration has a row ------------------------------------ */

/* CPU kernels that no row's ref case needs to name, each with its reason.
 * Empty today: every kernel of kernels_cpu.h and precision_kernels.h is
 * checked by a ref case.  An entry here is a kernel without a float64 or
 * finite-difference check, so give the reason. */
static const struct {
  const char *name, *why;
} kKernelExempt[] = {
    {NULL, NULL},
};

/* name, as a whole space-separated word of list */
static int in_list(const char *list, const char *name) {
  const size_t len = strlen(name);
  for (const char *p = list; p && (p = strstr(p, name)); p += len) {
    const int starts = p == list || p[-1] == ' ';
    if (starts && (p[len] == ' ' || p[len] == '\0')) return 1;
  }
  return 0;
}

typedef enum decl_kind { DECL_CODELET, DECL_INSERT, DECL_LAUNCHER, DECL_KERNEL } decl_kind;

#define MAX_DECLARED 256
static struct {
  char name[96];
  decl_kind kind;
} g_declared[MAX_DECLARED];
static int g_ndeclared;

static void check_declaration(const char *header, const char *name, decl_kind kind) {
  if (kind == DECL_KERNEL) {
    int named = 0;
    for (int r = 0; r < g_nrows; r++)
      named |= in_list(g_rows[r]->kernels, name) && g_rows[r]->run[OPS_REF] != NULL;
    for (int i = 0; kKernelExempt[i].name; i++) named |= strcmp(kKernelExempt[i].name, name) == 0;
    CHECK(named, "%s declares the CPU kernel %s, which no row's ref case names (.kernels)",
          header, name);
    return;
  }
  int rows = 0, own = 0;
  for (int r = 0; r < g_nrows; r++)
    if (in_list(g_rows[r]->covers, name)) {
      rows++;
      /* tg_<op>_insert belongs to the row named <op>: one row per op */
      own |= strlen(name) == strlen(g_rows[r]->name) + 10 &&
             strncmp(name + 3, g_rows[r]->name, strlen(g_rows[r]->name)) == 0;
    }
  CHECK(rows > 0, "%s declares %s, which no row of the op table covers", header, name);
  if (kind == DECL_INSERT && rows > 0)
    CHECK(rows == 1 && own, "%s: the insert wrapper %s needs a row of its own, named after it",
          header, name);
}

static void declare(const char *header, const char *name, decl_kind kind) {
  for (int i = 0; i < g_ndeclared; i++)
    if (strcmp(g_declared[i].name, name) == 0) return;
  if (g_ndeclared == MAX_DECLARED) {
    CHECK(0, "more than %d declarations", MAX_DECLARED);
    return;
  }
  snprintf(g_declared[g_ndeclared].name, sizeof g_declared[0].name, "%s", name);
  g_declared[g_ndeclared++].kind = kind;
  check_declaration(header, name, kind);
}

static int has_suffix(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len > n && strncmp(s + len - n, suffix, n) == 0;
}

static const char *const kIdent = "abcdefghijklmnopqrstuvwxyz0123456789_";

/* p starts a function declaration: only a return type before it on its line
 * (a name followed by '(' in a comment is a mention) */
static int declared_at(const char *text, const char *p) {
  const char *line = p;
  while (line > text && line[-1] != '\n') line--;
  static const char *const types[] = {"void ", "size_t ", "uint16_t ", "float ", "int ",
                                      "double "};
  for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
    size_t n = strlen(types[t]);
    if ((size_t)(p - line) >= n && strncmp(line, types[t], n) == 0) {
      const char *q = line + n;
      while (q < p && (*q == ' ' || *q == '*')) q++;
      if (q == p) return 1;
    }
  }
  return 0;
}

/* the codelets (tokens tg_*_cl of a "struct starpu_codelet" declaration),
 * insert wrappers (tg_*_insert followed by '('), in kernels_cuda*.h the
 * launchers (tg_cuda_*( but not the *_scratch_floats sizes), and in
 * kernels_cpu.h and precision_kernels.h the CPU kernels (every function
 * declared there: the kernels, the scalar conversions, the workspace sizes) */
static void scan_header(const char *dir, const char *header) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, header);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  CHECK(ferror(f) == 0 && n < sizeof text - 1, "cannot read all of %s", path);
  text[n] = '\0';
  if (fclose(f) != 0) CHECK(0, "fclose %s", path);
  const int launchers = strncmp(header, "kernels_cuda", 12) == 0;
  const int kernels = strcmp(header, "kernels_cpu.h") == 0 ||
                      strcmp(header, "precision_kernels.h") == 0;
  int in_codelets = 0, nkernels = 0;
  for (char *p = text; *p; p++) {
    if (strncmp(p, "struct starpu_codelet", 21) == 0) in_codelets = 1;
    if (*p == ';') in_codelets = 0;
    if (strncmp(p, "tg_", 3) != 0 || (p > text && strchr(kIdent, p[-1]))) continue;
    size_t len = strspn(p, kIdent);
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    if (in_codelets && has_suffix(p, len, "_cl")) declare(header, name, DECL_CODELET);
    if (p[len] == '(' && has_suffix(p, len, "_insert")) declare(header, name, DECL_INSERT);
    if (launchers && p[len] == '(' && strncmp(p, "tg_cuda_", 8) == 0 &&
        !has_suffix(p, len, "_scratch_floats"))
      declare(header, name, DECL_LAUNCHER);
    if (kernels && p[len] == '(' && declared_at(text, p)) {
      declare(header, name, DECL_KERNEL);
      nkernels++;
    }
    p += len - 1;
  }
  if (kernels) CHECK(nkernels >= 10, "only %d CPU kernels found in %s", nkernels, header);
}

/* every word of a row's list is declared (of the kinds the list holds) */
static void check_list(const ops_row *row, const char *list, const char *field, int kernels) {
  for (const char *p = list ? list : ""; *p;) {
    size_t len = strcspn(p, " ");
    int found = 0;
    for (int i = 0; i < g_ndeclared; i++)
      found |= strlen(g_declared[i].name) == len && strncmp(g_declared[i].name, p, len) == 0 &&
               (g_declared[i].kind == DECL_KERNEL) == kernels;
    CHECK(found, "row %s: .%s names %.*s, which no header declares as %s", row->name, field,
          (int)len, p, kernels ? "a CPU kernel" : "a codelet, insert wrapper or launcher");
    p += len;
    p += strspn(p, " ");
  }
}

static void check_complete(void) {
  const char *dir = TG_OPS_HEADER_DIR;
  DIR *d = opendir(dir);
  CHECK(d != NULL, "cannot list %s", dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len > 2 && strcmp(e->d_name + len - 2, ".h") == 0) scan_header(dir, e->d_name);
  }
  closedir(d);
  CHECK(g_ndeclared > 20, "only %d declarations found in %s", g_ndeclared, dir);
  /* no stale names, no row named twice, a row with kernels has a ref case */
  for (int r = 0; r < g_nrows; r++) {
    const ops_row *row = g_rows[r];
    check_list(row, row->covers, "covers", 0);
    check_list(row, row->kernels, "kernels", 1);
    CHECK(!row->kernels || !*row->kernels || row->run[OPS_REF],
          "row %s names CPU kernels but has no ref case", row->name);
    CHECK(find_row(row->name) == row, "two rows are named %s", row->name);
    CHECK(row->doc && *row->doc && row->buffers && (*row->buffers || !*row->covers),
          "row %s: no .doc or .buffers (its line of the codelet table, `test_ops table`)",
          row->name);
  }
  printf("op table: %d rows; %d declarations in %s checked against them\n", g_nrows,
         g_ndeclared, dir);
}

/* ---- the codelet table (`test_ops table`, Markdown) ----------------------------------- */

/* the words of list that are launchers (cuda 1) or not (cuda 0) */
static void print_words(const char *list, int cuda, const char *none) {
  int any = 0;
  for (const char *p = list ? list : ""; *p;) {
    size_t len = strcspn(p, " ");
    if ((strncmp(p, "tg_cuda_", 8) == 0) == cuda) {
      printf("%s`%.*s`", any ? ", " : "", (int)len, p);
      any = 1;
    }
    p += len;
    p += strspn(p, " ");
  }
  if (!any) printf("%s", none);
}

static void print_table(void) {
  printf("| op | computes | insert wrapper, codelets | CPU kernels | CUDA launchers | buffers "
         "(mode) | op table backends |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  for (int r = 0; r < g_nrows; r++) {
    const ops_row *row = g_rows[r];
    printf("| %s | %s | ", row->name, row->doc ? row->doc : "");
    print_words(row->covers, 0, "");
    printf(" | ");
    print_words(row->kernels, 0, "-");
    printf(" | ");
    print_words(row->covers, 1, "-");
    printf(" | %s | ", row->buffers ? row->buffers : "");
    int any = 0;
    for (int b = 0; b < OPS_NBACKENDS; b++)
      if (row->run[b] || b == OPS_CUDA_EMU) { /* cuda-emu: in test_ops_emu */
        if (b == OPS_CUDA_EMU && !row->run[b] && row->why_not[b] &&
            strcmp(row->why_not[b], OPS_EMU_ONLY) != 0)
          continue;
        printf("%s%s", any ? ", " : "", g_backend_names[b]);
        any = 1;
      }
    printf(" |\n");
  }
}

/* ---- main ---------------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: test_ops ref|cpu|cuda|cuda-emu|device|lowp\n"
                  "       test_ops table   (the codelet table, Markdown)\n");
  return 2;
}

int main(int argc, char **argv) {
  ops_rows();
  if (argc == 3 && strcmp(argv[1], "child") == 0) { /* ops_run_worker_counts */
    char backend[32];
    const char *colon = strchr(argv[2], ':');
    if (!colon || colon - argv[2] >= (int)sizeof backend) return usage();
    snprintf(backend, sizeof backend, "%.*s", (int)(colon - argv[2]), argv[2]);
    g_row = find_row(colon + 1);
    if (parse_backend(backend, &g_backend) != 0 || !g_row || !g_row->run[g_backend])
      return usage();
    g_child = 1;
    g_row->run[g_backend](); /* exits in ops_run_worker_counts */
    fprintf(stderr, "test_ops: row %s ran no worker-count body\n", g_row->name);
    return 1;
  }
  if (argc == 2 && strcmp(argv[1], "table") == 0) {
    print_table();
    return 0;
  }
  if (argc != 2 || parse_backend(argv[1], &g_backend) != 0) return usage();
  /* the GEMM back end of TG_GEMM_LIB for the kernels called directly too
   * (the ref cases; the others get it from tg_init): test_ops_ref_onednn,
   * ..._libxsmm run every row on that library.  The gemm row's ref case
   * loops over every back end itself. */
  if (getenv("TG_GEMM_LIB") && tg_gemm_choose(NULL, NULL) != 0) {
    fprintf(stderr, "test_ops: %s\n", tg_last_error());
    return 2;
  }
  if (getenv("TG_GEMM_LIB"))
    printf("test_ops: GEMM back end %s (TG_GEMM_LIB)\n",
           tg_gemm_lib_name(tg_cpu_gemm_lib(TG_GEMM_FORWARD)));
#ifndef OPS_EMU
  if (g_backend == OPS_CUDA_EMU) {
    fprintf(stderr, "test_ops: the cuda-emu backend is in test_ops_emu\n");
    return 2;
  }
#endif
  const int start = ops_backend_start(g_backend);
  if (start == TG_TEST_SKIP) {
    for (int r = 0; r < g_nrows; r++) printf("%-22s %-8s  SKIP\n", g_rows[r]->name, argv[1]);
    return TG_TEST_SKIP;
  }
  if (start != 0) return 1;
  for (int r = 0; r < g_nrows; r++) run_row(g_rows[r]);
  ops_backend_stop(g_backend);
  g_row = NULL;
  check_complete();
  printf("test_ops %s: %d checks, %d failed\n", argv[1], g_checks, g_failures);
  return g_failures ? 1 : 0;
}
