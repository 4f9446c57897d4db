#!/usr/bin/env bash
# docs/codelets.md's codelet table against the op table: its generated
# section must be what scripts/gen-op-docs writes from this build's
# `test_ops table` (one line per row: .doc, .covers, .kernels, .buffers),
# so a row added, renamed or changed without regenerating the page fails
# here, with the diff and the command that fixes it.
set -u
doc="$TG_SOURCE_DIR/docs/codelets.md"
ops="$TG_BIN/test_ops"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -x "$ops" ] || { echo "FAIL no $ops"; echo "0 passed, 1 failed"; exit 1; }
cp "$doc" "$work/codelets.md"
if ! "$TG_SOURCE_DIR/scripts/gen-op-docs" "$ops" "$work/codelets.md"; then
  echo "FAIL scripts/gen-op-docs failed"; echo "0 passed, 1 failed"; exit 1
fi
if ! diff -u "$doc" "$work/codelets.md"; then
  echo "FAIL docs/codelets.md's codelet table differs from the op table's rows"
  echo "     fix: scripts/gen-op-docs $ops   (in $TG_SOURCE_DIR), then commit docs/codelets.md"
  echo "0 passed, 1 failed"; exit 1
fi
rows=$(( $(STARPU_SILENT=1 "$ops" table | wc -l) - 2 ))
echo "ok   docs/codelets.md's codelet table matches the op table's $((rows)) rows"
echo "1 passed, 0 failed"
