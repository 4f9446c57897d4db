# The optimizer's row blocks (graphs/optim.c, TG_OPTIM_BLOCK_MIN): a
# parameter of at least 2^22 values is updated by one task per worker on row
# blocks of it, its gradient and state, instead of one task.  Element-wise
# optimizers, so the result must be the same bits:
#  - a GPT whose token embedding has 8192 x 512 = 2^22 values, trained
#    --deterministic with 2 micro-batches on 1 CPU worker (one task: one
#    worker gives no blocks) and on 2 (two blocks): the losses and the saved
#    models are equal bit for bit, fp32 and bf16 (the mixed-precision AdamW
#    with its 16-bit copy blocked too);
#  - the 2-worker run did split: 2 block tasks a step (--stats), where the
#    1-worker run updates every parameter in multi-tensor groups;
#  - on 2 emulated devices (deterministic: blocks on device memory nodes),
#    the same bits again (SKIP of that part without PoCL).
. "$(dirname "$0")/cli_testlib.sh"
"$tg" init gpt --layers 1 --channels 512 --heads 4 --max-seq 16 --vocab 8192 --seed 4 \
  --out "$work/g.bin" >/dev/null || { echo "FAIL init gpt"; exit 1; }
token_file "$work/tokens.bin" 3000 7919 13 8192 || { echo "FAIL token file"; exit 1; }
steps=3
args=(train gpt --init-from "$work/g.bin" --data "$work/tokens.bin" --batch 4 --seq 16
      --micro-batches 2 --steps $steps --lr 1e-3 --deterministic --stats)
# tasks per kind in --stats: whole parameters go in groups (tg_adamw_multi),
# a blocked one in a tg_adamw or tg_adamw_amp task per block
tasks_of() { awk -v k="$2" '$1 == k {print $2}' "$1"; }
adamw_tasks() { echo $(( $(tasks_of "$1" tg_adamw) + $(tasks_of "$1" tg_adamw_amp) + 0 )); }

for prec in fp32 bf16; do
  for w in 1 2; do
    "$tg" "${args[@]}" --precision $prec --ncpus $w --save "$work/$prec-$w.bin" \
      >"$work/$prec-$w.out" 2>&1 || bad "$prec, $w workers: $(tail -2 "$work/$prec-$w.out")"
  done
  t1=$(adamw_tasks "$work/$prec-1.out") t2=$(adamw_tasks "$work/$prec-2.out")
  m1=$(tasks_of "$work/$prec-1.out" tg_adamw_multi) m2=$(tasks_of "$work/$prec-2.out" tg_adamw_multi)
  # 1 worker: every parameter whole, in one group (one task a step); 2
  # workers: the embedding in 2 blocks, the rest still in groups
  if [ "$t1" -eq 0 ] && [ "$t2" -eq $((2 * steps)) ] && [ "${m1:-0}" -ge "$steps" ] &&
     [ "${m2:-0}" -ge "$steps" ]; then
    ok "$prec: 2 workers split the embedding's update ($t2 block tasks; $m1 and $m2 group tasks)"
  else
    bad "$prec: block tasks '$t1' (1 worker) and '$t2' (2 workers), group tasks '$m1' and '$m2': no split"
  fi
  if [ "$(losses "$work/$prec-1.out")" = "$(losses "$work/$prec-2.out")" ] &&
     [ -n "$(losses "$work/$prec-1.out")" ] && cmp -s "$work/$prec-1.bin" "$work/$prec-2.bin"; then
    ok "$prec: blocked and whole updates give the same losses and model, bit for bit"
  else
    bad "$prec: blocked update differs: $(diff <(losses "$work/$prec-1.out") <(losses "$work/$prec-2.out") | head -3 | tr '\n' ' ')"
  fi
done

if "$tg" bench mlp --batch 8 --hidden 8 --steps 1 --warmup 0 --emulated-devices 1 \
     >"$work/probe.out" 2>&1; then
  "$tg" "${args[@]}" --emulated-devices 2 --ncpus 0 --save "$work/dev.bin" >"$work/dev.out" 2>&1 ||
    bad "2 emulated devices: $(tail -2 "$work/dev.out")"
  if cmp -s "$work/fp32-1.bin" "$work/dev.bin" &&
     [ "$(losses "$work/fp32-1.out")" = "$(losses "$work/dev.out")" ]; then
    ok "2 emulated devices: blocks on device memory, the same bits"
  else
    bad "2 emulated devices: the model or losses differ"
  fi
else
  echo "skip the emulated-device part: $(grep -m1 . "$work/probe.out")"
fi
finish test_optim_blocks
