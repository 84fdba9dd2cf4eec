#!/usr/bin/env bash
# Issue 53: per-head budget profiles (profile=FILE) against KVzip, KeyDiff and the default.
# docs/results.md §8 has the tables; research/results/budget-profile/ the rows. Each step writes
# an eval folder under OUT (default /work/r53, the run's own paths, which the stored rows name);
# re-running resumes.
#   STEP=sets     the task sets: calibration contexts (seed 55555, 3 per family, 960 tokens),
#                 the dev set (seed 24680, 10 per family) and the 960-token test set (seed 86420,
#                 20 per family), all from research/scripts/make_eval_splits.py --fresh
#   STEP=calib    primekv calibrate on the calibration contexts: models/primekv-retrieval{,-2}.budget.json
#                 (the long model's: 2 per family of make_long_splits.py --splits fresh
#                 --fresh-seed 55555 at 4096 tokens -> models/primekv-long.budget.json)
#   STEP=dev      what was tried, dev set, retrieval-2: lookback (three forms) at 0.9, then the
#                 profile on the default's and on KeyDiff's scores at 0.5, 0.75, 0.9
#   STEP=test960  the chosen press (primekv with the profile), once, on the 960-token test set
#   STEP=test1900 the same on research/results/heldout-test (30 per family, ~1,900 tokens; KVzip's
#                 second pass needs --ctx-size 4096 past the trained 2048)
#   STEP=dev1900  the default and the profile on research/results/heldout-dev (20 per family)
#   STEP=fresh1900 the default and the profile at 0.5 and 0.75 on a fresh ~1,900-token set
#                 (seed 97531, 30 per family, outside the repository): does the test split's
#                 loss at 0.5 replicate?
#   STEP=chunked  chunked prefill (chunks of 256) on the dev set at 0.75 and 0.9
#   STEP=long     the long model at 16K: the profile added to research/results/long-tables/test-16384
#                 (its rows copied into OUT/long16k first; the task paths there are
#                 /work/long-run/splits, a link to make_long_splits.py's output)
#   STEP=nestdev  the profile nested below 0.9 (primekv:profile=...,nest=0.9) added to the dev
#                 folders at both lengths (dev-b, dev1900-r2, restored from the stored rows)
#   STEP=nesttest the same, once, added to the test folders (test960-r2, test1900-r2)
#   STEP=nestlong the long model's profile nested below 0.9 at 0.5 and 0.75, added to long16k
#                 (restored from the stored rows; at 0.9 the nested press is the profile itself)
#   STEP=confirm  the default, the profile and the nested profile on two fresh sets made after
#                 the test and kept outside the repository (seed 61207 at ~1,900 tokens, 30 per
#                 family; seed 61208 at 960 tokens, 20 per family, with keydiff and kvzip at 0.9)
# Gap closed and cost: research/scripts/gap_closed.py FOLDER --new PRESS.
set -euo pipefail
cd "$(dirname "$0")/../.."
step="${STEP:?STEP=sets|calib|dev|test960|test1900|dev1900|fresh1900|chunked|long|nestdev|nesttest|nestlong|confirm}"
out="${OUT:-/work/r53}"
bin="${PRIMEKV_BIN:-build/release/src/cli/primekv}"
m1=models/primekv-retrieval.gguf m2=models/primekv-retrieval-2.gguf
p1=models/primekv-retrieval.budget.json p2=models/primekv-retrieval-2.budget.json
fams="single single_uuid multikey dense multivalue multiquery vt freq multiturn near_key drift"
tasks() {  # tasks DIR
  local t=""
  for f in $fams; do t+="${t:+,}jsonl:$1/$f.jsonl"; done
  echo "$t"
}
ev() { "$bin" eval --threads 2 --seed 42 -q "$@" > /dev/null; }
n2="primekv:profile=$p2,nest=0.9"
restore() {  # restore NAME: OUT/NAME from research/results/budget-profile/NAME's rows
  local from=research/results/budget-profile/$1
  mkdir -p "$out/$1"
  [[ -f "$out/$1/results.jsonl" ]] || xz -dkc "$from/results.jsonl.xz" > "$out/$1/results.jsonl"
  [[ -f "$out/$1/config.json" ]] || cp "$from/config.json" "$out/$1/"
}
case "$step" in
  sets)
    for s in "55555 3 calib960" "24680 10 dev960" "86420 20 test960"; do
      set -- $s
      /usr/bin/python3 research/scripts/make_eval_splits.py --length 960 --fresh "$1" --test "$2" \
        --out "$out/$3"
    done ;;
  calib)
    c=$(tasks "$out/calib960/heldout-fresh-55555")
    "$bin" calibrate -m "$m2" --tasks "$c" -t 2 -o "$p2"
    "$bin" calibrate -m "$m1" --tasks "$c" -t 2 -o "$p1"
    /usr/bin/python3 scripts/make_long_splits.py --splits fresh --fresh-seed 55555 --lengths 4096 \
      --n 4 --out "$out/long-calib"
    c=""; for f in "$out"/long-calib/long-fresh-55555/4096/*.jsonl; do c+="${c:+,}jsonl:$f"; done
    "$bin" calibrate -m models/primekv-long.gguf --tasks "$c" --samples 2 -t 2 \
      -o models/primekv-long.budget.json ;;
  dev)
    t=$(tasks "$out/dev960/heldout-fresh-24680")
    ev -m "$m2" --tasks "$t" --samples 10 --ratios 0.9 --out "$out/dev-a" \
      --presses "none;keydiff;primekv;kvzip;lookback;lookback:budget=global;lookback:reduce=mean"
    # the dev rows name the profile by the path it had then (the same file as $p2)
    ev -m "$m2" --tasks "$t" --samples 10 --ratios 0.5,0.75,0.9 --out "$out/dev-b" \
      --presses "none;keydiff;primekv;kvzip;primekv:profile=$p2;keydiff:profile=$p2" ;;
  test960)
    t=$(tasks "$out/test960/heldout-fresh-86420")
    for c in keydiff primekv kvzip; do
      ev -m "$m2" --tasks "$t" --samples 20 --ratios 0.5,0.75,0.9 --out "$out/test960-r2" \
        --presses "none;keydiff;primekv;kvzip;primekv:profile=$p2" --compare "$c,primekv:profile=$p2"
    done ;;
  test1900)
    t=$(tasks research/results/heldout-test)
    for c in keydiff primekv kvzip; do
      ev -m "$m2" --tasks "$t" --samples 30 --ratios 0.5,0.75,0.9 --ctx-size 4096 \
        --allow-ctx-overflow --out "$out/test1900-r2" \
        --presses "none;keydiff;primekv;kvzip;primekv:profile=$p2" --compare "$c,primekv:profile=$p2"
    done ;;
  dev1900)
    ev -m "$m2" --tasks "$(tasks research/results/heldout-dev)" --samples 20 \
      --ratios 0.5,0.75,0.9 --out "$out/dev1900-r2" \
      --presses "none;primekv;primekv:profile=$p2" --compare "primekv,primekv:profile=$p2" ;;
  fresh1900)
    [[ -d "$out/fresh1900/heldout-fresh-97531" ]] ||
      /usr/bin/python3 research/scripts/make_eval_splits.py --fresh 97531 --test 30 \
        --out "$out/fresh1900"
    ev -m "$m2" --tasks "$(tasks "$out/fresh1900/heldout-fresh-97531")" --samples 30 \
      --ratios 0.5,0.75 --out "$out/fresh1900-r2" \
      --presses "none;primekv;primekv:profile=$p2" --compare "primekv,primekv:profile=$p2" ;;
  chunked)
    ev -m "$m2" --tasks "$(tasks "$out/dev960/heldout-fresh-24680")" --mode chunked --chunk 256 \
      --samples 10 --ratios 0.75,0.9 --out "$out/dev-chunked" \
      --presses "none;keydiff;primekv;primekv:profile=$p2" ;;
  long)
    S=/work/long-run/splits/long-test/16384
    mkdir -p "$out/long16k"
    cp research/results/long-tables/test-16384/config.json "$out/long16k/"
    [[ -f "$out/long16k/results.jsonl" ]] ||
      xz -dkc research/results/long-tables/test-16384/results.jsonl.xz > "$out/long16k/results.jsonl"
    # Only the new press runs: listing kvzip would make every sample pay its second pass again.
    ev -m models/primekv-long.gguf -c 16896 --allow-ctx-overflow --samples 20 \
      --ratios 0.5,0.75,0.9 --out "$out/long16k" \
      --presses "none;primekv:profile=models/primekv-long.budget.json" \
      --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl"
    ;;
  nestdev)
    restore dev-b
    restore dev1900-r2
    ev -m "$m2" --tasks "$(tasks "$out/dev960/heldout-fresh-24680")" --samples 10 \
      --ratios 0.5,0.75,0.9 --out "$out/dev-b" --presses "none;primekv;$n2" \
      --compare "primekv,$n2"
    ev -m "$m2" --tasks "$(tasks research/results/heldout-dev)" --samples 20 \
      --ratios 0.5,0.75,0.9 --out "$out/dev1900-r2" --presses "none;primekv;$n2" \
      --compare "primekv,$n2" ;;
  nesttest)
    restore test960-r2
    restore test1900-r2
    for c in keydiff primekv kvzip "primekv:profile=$p2"; do
      ev -m "$m2" --tasks "$(tasks "$out/test960/heldout-fresh-86420")" --samples 20 \
        --ratios 0.5,0.75,0.9 --out "$out/test960-r2" --presses "none;$c;$n2" --compare "$c,$n2"
      ev -m "$m2" --tasks "$(tasks research/results/heldout-test)" --samples 30 \
        --ratios 0.5,0.75,0.9 --ctx-size 4096 --allow-ctx-overflow --out "$out/test1900-r2" \
        --presses "none;$c;$n2" --compare "$c,$n2"
    done ;;
  nestlong)
    S=/work/long-run/splits/long-test/16384
    [[ -d "$S" ]] || /usr/bin/python3 scripts/make_long_splits.py --lengths 16384 --splits test \
      --n 20 --families single multikey near_key vt --out /work/long-run/splits
    restore long16k
    nl="primekv:profile=models/primekv-long.budget.json,nest=0.9"
    ev -m models/primekv-long.gguf -c 16896 --allow-ctx-overflow --samples 20 --ratios 0.5,0.75 \
      --out "$out/long16k" --presses "none;primekv;$nl" --compare "primekv,$nl" \
      --tasks "jsonl:$S/single.jsonl,jsonl:$S/multikey.jsonl,jsonl:$S/near_key.jsonl,jsonl:$S/vt.jsonl"
    ;;
  confirm)
    [[ -d "$out/confirm1900/heldout-fresh-61207" ]] ||
      /usr/bin/python3 research/scripts/make_eval_splits.py --fresh 61207 --test 30 \
        --out "$out/confirm1900"
    [[ -d "$out/confirm960/heldout-fresh-61208" ]] ||
      /usr/bin/python3 research/scripts/make_eval_splits.py --length 960 --fresh 61208 --test 20 \
        --out "$out/confirm960"
    for c in primekv "primekv:profile=$p2"; do
      ev -m "$m2" --tasks "$(tasks "$out/confirm1900/heldout-fresh-61207")" --samples 30 \
        --ratios 0.5,0.75,0.9 --out "$out/confirm1900-r2" \
        --presses "none;primekv;primekv:profile=$p2;$n2" --compare "$c,$n2"
    done
    ev -m "$m2" --tasks "$(tasks "$out/confirm960/heldout-fresh-61208")" --samples 20 \
      --ratios 0.5,0.75,0.9 --out "$out/confirm960-r2" \
      --presses "none;primekv;primekv:profile=$p2;$n2" --compare "primekv,$n2"
    for c in keydiff kvzip; do
      ev -m "$m2" --tasks "$(tasks "$out/confirm960/heldout-fresh-61208")" --samples 20 \
        --ratios 0.9 --out "$out/confirm960-r2" --presses "none;$c;$n2" --compare "$c,$n2"
    done ;;
  *) echo "unknown STEP=$step" >&2; exit 2 ;;
esac
