/*
 * The op table's driver: `test_ops BACKEND` runs every row's case for that
 * backend and prints one line per row (checks, failures, the largest error
 * and its tolerance, or why the row has no case there); then it checks that
 * every codelet, insert wrapper and CUDA launcher declared in the public
 * headers has a row.  See ops_harness.h for the backends and the rules.
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

/* ---- the table --------------------------------------------------------------- */

static const ops_row *find_row(const char *name) {
  for (int f = 0; f < ops_nfamilies; f++)
    for (int r = 0; r < ops_families[f]->nrows; r++)
      if (strcmp(ops_families[f]->rows[r].name, name) == 0) return &ops_families[f]->rows[r];
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
    printf("%-16s %-8s  --  %s\n", row->name, g_backend_names[g_backend],
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
  printf("%-16s %-8s  %s  %d checks, %d failed, %s\n", row->name, g_backend_names[g_backend],
         g_row_failures ? "FAIL" : "ok", g_row_checks, g_row_failures, errors);
  CHECK(g_row_checks > 0, "row %s ran no check on %s", row->name, g_backend_names[g_backend]);
}

/* ---- completeness: every declaration has a row ------------------------------------ */

static int covered(const char *name) {
  const size_t len = strlen(name);
  for (int f = 0; f < ops_nfamilies; f++)
    for (int r = 0; r < ops_families[f]->nrows; r++)
      for (const char *p = ops_families[f]->rows[r].covers; (p = strstr(p, name)); p += len) {
        const int starts = p == ops_families[f]->rows[r].covers || p[-1] == ' ';
        if (starts && (p[len] == ' ' || p[len] == '\0')) return 1;
      }
  return 0;
}

#define MAX_DECLARED 256
static char g_declared[MAX_DECLARED][96];
static int g_ndeclared;

static void declare(const char *header, const char *name) {
  for (int i = 0; i < g_ndeclared; i++)
    if (strcmp(g_declared[i], name) == 0) return;
  if (g_ndeclared == MAX_DECLARED) {
    CHECK(0, "more than %d declarations", MAX_DECLARED);
    return;
  }
  snprintf(g_declared[g_ndeclared++], sizeof g_declared[0], "%s", name);
  CHECK(covered(name), "%s declares %s, which no row of the op table covers", header, name);
}

static int has_suffix(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return len > n && strncmp(s + len - n, suffix, n) == 0;
}

static const char *const kIdent = "abcdefghijklmnopqrstuvwxyz0123456789_";

/* the codelets (tokens tg_*_cl of a "struct starpu_codelet" declaration),
 * insert wrappers (tg_*_insert followed by '(') and, in kernels_cuda*.h,
 * the launchers (tg_cuda_*( but not the *_scratch_floats sizes) */
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
  int in_codelets = 0;
  for (char *p = text; *p; p++) {
    if (strncmp(p, "struct starpu_codelet", 21) == 0) in_codelets = 1;
    if (*p == ';') in_codelets = 0;
    if (strncmp(p, "tg_", 3) != 0 || (p > text && strchr(kIdent, p[-1]))) continue;
    size_t len = strspn(p, kIdent);
    char name[96];
    snprintf(name, sizeof name, "%.*s", (int)len, p);
    if (in_codelets && has_suffix(p, len, "_cl")) declare(header, name);
    if (p[len] == '(' && has_suffix(p, len, "_insert")) declare(header, name);
    if (launchers && p[len] == '(' && strncmp(p, "tg_cuda_", 8) == 0 &&
        !has_suffix(p, len, "_scratch_floats"))
      declare(header, name);
    p += len - 1;
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
  /* and every covered name is declared: no stale rows */
  for (int f = 0; f < ops_nfamilies; f++)
    for (int r = 0; r < ops_families[f]->nrows; r++) {
      const char *p = ops_families[f]->rows[r].covers;
      while (*p) {
        size_t len = strcspn(p, " ");
        int found = 0;
        for (int i = 0; i < g_ndeclared; i++)
          found |= strlen(g_declared[i]) == len && strncmp(g_declared[i], p, len) == 0;
        CHECK(found, "row %s covers %.*s, which no header declares", ops_families[f]->rows[r].name,
              (int)len, p);
        p += len;
        p += strspn(p, " ");
      }
    }
  printf("op table: %d declarations in %s checked against the rows\n", g_ndeclared, dir);
}

/* ---- main ---------------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: test_ops ref|cpu|cuda|cuda-emu|device|lowp\n");
  return 2;
}

int main(int argc, char **argv) {
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
  if (argc != 2 || parse_backend(argv[1], &g_backend) != 0) return usage();
#ifndef OPS_EMU
  if (g_backend == OPS_CUDA_EMU) {
    fprintf(stderr, "test_ops: the cuda-emu backend is in test_ops_emu\n");
    return 2;
  }
#endif
  const int start = ops_backend_start(g_backend);
  if (start == TG_TEST_SKIP) {
    for (int f = 0; f < ops_nfamilies; f++)
      for (int r = 0; r < ops_families[f]->nrows; r++)
        printf("%-16s %-8s  SKIP\n", ops_families[f]->rows[r].name, argv[1]);
    return TG_TEST_SKIP;
  }
  if (start != 0) return 1;
  for (int f = 0; f < ops_nfamilies; f++)
    for (int r = 0; r < ops_families[f]->nrows; r++) run_row(&ops_families[f]->rows[r]);
  ops_backend_stop(g_backend);
  check_complete();
  printf("test_ops %s: %d checks, %d failed\n", argv[1], g_checks, g_failures);
  return g_failures ? 1 : 0;
}
