# Shared helpers of the CLI shell tests (sourced, not run): a scratch
# directory removed on exit, pass/fail counters, and expect_fail, which runs
# taskgrad and requires exit status 2 with exactly one "taskgrad: error: "
# line matching a pattern (never a crash, never a second message).
set -u
tg="$TG_BIN/taskgrad"
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0

ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# expect_fail "description" "message regex" taskgrad-args...
expect_fail() { expect_fail_of "$tg" 'taskgrad: error: ' "$@"; }

# expect_fail_of PROGRAM PREFIX "description" "message regex" args...: the
# same for another program, whose one message line starts with PREFIX
expect_fail_of() {
  local prog=$1 prefix=$2 what=$3 pattern=$4
  shift 4
  "$prog" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne 2 ]; then
    bad "$what: exit status $rc, expected 2 ($(head -c 300 "$work/err"))"
  elif ! grep -Eq -e "$pattern" "$work/err"; then
    bad "$what: message '$(cat "$work/err")' does not match /$pattern/"
  elif [ "$(grep -c "$prefix" "$work/err")" -ne 1 ]; then
    bad "$what: expected one error line, got: $(cat "$work/err")"
  else
    ok "$what: $(cat "$work/err")"
  fi
}

# token_file FILE N A B MOD: an llm.c token file (magic 20240520, version 1)
# of the N tokens (i * A + i / B) % MOD, i = 0..N-1: the GPT tests' data
token_file() {
  "$py" - "$@" <<'PY'
import struct, sys
path = sys.argv[1]
n, a, b, mod = (int(v) for v in sys.argv[2:6])
toks = [(i * a + i // b) % mod for i in range(n)]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack(f"<{len(toks)}H", *toks))
PY
}

# losses FILE...: "step N loss X ..." lines as "N X", one per step
losses() { sed -nE 's/^step ([0-9]+) loss ([^ ]+) .*/\1 \2/p' "$@"; }

# losses_within A B N TOL: files of losses (as printed by `losses`) with the
# same N steps, each pair within TOL relative; prints the largest
# difference, and fails when a step is missing or a difference exceeds TOL
losses_within() {
  paste "$1" "$2" | awk -v n="$3" -v tol="$4" '
    NF != 4 || $1 != $3 {bad = 1}
    {d = ($2 - $4) / $2; d = d < 0 ? -d : d; if (d > w) w = d}
    END {if (bad || NR != n) exit 1; printf "%.1e", w; exit w > tol}'
}

# flip_bit FILE OFFSET MASK: XORs the byte at OFFSET (negative: from the
# end) with MASK, in place
flip_bit() {
  "$py" - "$@" <<'PY'
import sys
path, at, mask = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
b[at] ^= mask
open(path, "wb").write(b)
PY
}

# kill_when FILE OUT ERR taskgrad-args...: runs taskgrad in the background,
# kills it with SIGKILL (a scheduler's preemption) as soon as FILE exists (up
# to 60 s), and returns its exit status: 137 when the kill landed mid-run
kill_when() {
  local file=$1 out=$2 err=$3 pid i
  shift 3
  "$tg" "$@" >"$out" 2>"$err" &
  pid=$!
  for i in $(seq 1 3000); do
    [ -f "$file" ] && break
    sleep 0.02
  done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid"
}

# finish NAME: the closing line, and the exit status
finish() {
  echo "$1: $pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
