#!/usr/bin/env bash
# The documentation against the command line's --help texts:
#  (a) docs/cli.md's generated section is what scripts/gen-cli-docs writes
#      from this build's help texts (else: a diff and the command to fix it);
#  (b) every --flag of each command's --help appears in that command's
#      section of docs/cli.md (the commands are read from `taskgrad help`, so
#      a new command missing from the generator fails here too);
#  (c) every --flag written in README.md and docs/*.md (outside the
#      generated section) is accepted by some taskgrad command, or is one of
#      the few flags of other programs listed below, in a paragraph that
#      names that program.
set -u
export LC_ALL=C
tg="$TG_BIN/taskgrad"
src="$TG_SOURCE_DIR"
cli="$src/docs/cli.md"
BEGIN='<!-- BEGIN GENERATED: scripts/gen-cli-docs -->'
END='<!-- END GENERATED -->'
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# Flags of other programs that the docs may show, each with the program (an
# extended regex) whose name must appear in the same paragraph.
EXTERNAL='
--build           cmake
--install         cmake
--target          cmake
--prefix          build-starpu|cmake --install
--test-dir        ctest
--output-on-failure ctest
--cuda            build-starpu
--simgrid         build-starpu
--opencl          build-starpu
--mpi             build-starpu
--jobs            build-starpu
--hostfile        mpirun
--ceiling         gemm_libs
--map-by          mpirun
--bind-to         mpirun
--oversubscribe   mpirun
--allow-run-as-root mpirun
--cflags          pkg-config
--libs            pkg-config
--with-fxt        configure
--dry-run         gpu-check|gpu-session|lease-compare
--bin             gpu-session
--build-dir       gpu-bundle|gpu-check
'

# flags < text: the --flag tokens of a text, one per line, sorted, unique
flags() {
  grep -oE -- '(^|[^[:alnum:]_-])--[a-z][a-z0-9-]*' | sed -E 's/^[^-]//; s/-+$//' | sort -u
}

[ -x "$tg" ] || { bad "no taskgrad binary at $tg"; exit 1; }
[ -f "$cli" ] || { bad "no $cli"; exit 1; }

# (a) the generated section is up to date
cp "$cli" "$work/cli.md"
if ! "$src/scripts/gen-cli-docs" "$tg" "$work/cli.md" >"$work/gen.err" 2>&1; then
  bad "(a) scripts/gen-cli-docs failed: $(cat "$work/gen.err")"
elif ! diff -u "$cli" "$work/cli.md" >"$work/cli.diff"; then
  bad "(a) docs/cli.md is stale: its generated section differs from the --help texts:"
  head -n 80 "$work/cli.diff"
  echo "     fix: scripts/gen-cli-docs $tg   (in $src), then commit docs/cli.md"
else
  ok "(a) docs/cli.md's generated section matches the --help texts"
fi

# (b) every flag of every command's --help is in its section of docs/cli.md
mapfile -t commands < <("$tg" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
  on && match($0, /^  [a-z]+( [a-z]+)?  /) { c = substr($0, 3, RLENGTH - 4); if (c != "help") print c }')
[ ${#commands[@]} -ge 8 ] || bad "(b) read only ${#commands[@]} commands from 'taskgrad help'"
commands+=("simulate gpt" "simulate mlp")
"$tg" help | flags >"$work/accepted"
# section CMD: the lines of docs/cli.md under '### `taskgrad CMD`' (for
# 'simulate gpt|mlp': their own section if any, else simulate's)
section() {
  local title=$1
  grep -qxF "### \`taskgrad $title\`" "$cli" || title=${title%% *}
  awk -v h="### \`taskgrad $title\`" '$0 == h { on = 1; next } on && (/^### / || /^<!-- END GENERATED/) { exit } on' "$cli"
}
for c in "${commands[@]}"; do
  # shellcheck disable=SC2086
  if ! "$tg" $c --help >"$work/help" 2>"$work/help.err"; then
    bad "(b) 'taskgrad $c --help' failed: $(cat "$work/help.err")"
    continue
  fi
  flags <"$work/help" >"$work/help.flags"
  cat "$work/help.flags" >>"$work/accepted"
  section "$c" | flags >"$work/doc.flags"
  missing=$(comm -23 "$work/help.flags" "$work/doc.flags" | tr '\n' ' ')
  if [ -n "$missing" ]; then
    bad "(b) 'taskgrad $c --help' has flags missing from docs/cli.md's section for it: $missing"
  else
    ok "(b) the $(wc -l <"$work/help.flags") flags of 'taskgrad $c --help' are in docs/cli.md"
  fi
done
sort -u -o "$work/accepted" "$work/accepted"

# (c) every flag in the docs exists (outside the generated section, which (a)
# checks): paragraph by paragraph, so that a flag of another program is
# accepted only where that program is named
docs=("$src/README.md" "$src"/docs/*.md)
report=$(awk -v begin="$BEGIN" -v end="$END" -v accepted="$work/accepted" -v ext="$EXTERNAL" '
  BEGIN {
    while ((getline f < accepted) > 0) ok[f] = 1
    n = split(ext, lines, "\n")
    for (i = 1; i <= n; i++) {
      if (lines[i] == "") continue
      flag = lines[i]; sub(/ .*/, "", flag)
      prog = lines[i]; sub(/^[^ ]+ +/, "", prog)
      extprog[flag] = prog
    }
  }
  function flush(   k, rest, f) {
    for (k = 1; k <= nl; k++) {
      rest = line[k]
      while (match(rest, /(^|[^[:alnum:]_-])--[a-z][a-z0-9-]*/)) {
        f = substr(rest, RSTART, RLENGTH); sub(/^[^-]/, "", f); sub(/-+$/, "", f)
        rest = substr(rest, RSTART + RLENGTH)
        if (f in ok) continue
        if (f in extprog) {
          if (para !~ extprog[f])
            printf "%s:%d: %s (a flag of %s) in a paragraph that does not name %s\n", file, num[k], f, extprog[f], extprog[f]
          continue
        }
        printf "%s:%d: %s is not a flag of any taskgrad command\n", file, num[k], f
      }
    }
    para = ""; nl = 0
  }
  FNR == 1 { flush(); file = FILENAME; gen = 0 }
  $0 == begin { flush(); gen = 1; next }
  $0 == end { gen = 0; next }
  gen { next }
  /^[[:space:]]*$/ { flush(); next }
  { line[++nl] = $0; num[nl] = FNR; para = para "\n" $0 }
  END { flush() }' "${docs[@]}")
if [ -n "$report" ]; then
  bad "(c) the docs name flags that no taskgrad command accepts:"
  printf '%s\n' "$report" | sed "s|^$src/|     |"
  echo "     (a flag of another program: add it, with its program, to EXTERNAL in tests/test_docs_flags.sh)"
else
  ok "(c) every --flag in README.md and docs/*.md ($(printf '%s\n' "${docs[@]##*/}" | tr '\n' ' ')) exists"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
