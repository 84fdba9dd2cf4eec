#!/bin/sh
# Fixtures of eval.table: sh eval_setup.sh DIR BIN MODEL (see ../run_table.sh).
set -eu
T="$1" BIN="$2" S="$3"
cd "$T"
row='"context": "Lily had a red ball.", "metric": "qa_f1", "turns": [{"question": "What did Lily have?", "answers": ["ball"]}]}'
printf '{"id": "ok", %s\n' "$row" > ok.jsonl
# Four turns, for resume checks.
printf '{"id": "m", "context": "Lily had a red ball.", "metric": "qa_f1", "turns": [%s]}\n' \
  '{"question": "q1", "answers": ["a"]}, {"question": "q2", "answers": ["b"]}, {"question": "q3", "answers": ["c"]}, {"question": "q4", "answers": ["d"]}' \
  > turns4.jsonl
cp ok.jsonl same.jsonl
ln -s same.jsonl link.jsonl
cp ok.jsonl 'a,b.jsonl'
cp ok.jsonl "q'uote.jsonl"
# A task file whose name tries to end gnuplot's quoted title and run a command.
cp ok.jsonl "t'; system('touch PWNED2'); '.jsonl"
printf '{"id": "e", "context": "c", "metric": "string_match_all", "turns": [{"question": "q", "answers": [""]}]}\n' > empty.jsonl
cat ok.jsonl >> empty.jsonl
printf '{"id": "e", "context": "c", "metric": "string_match_part", "turns": [{"question": "q", "answers": ["  "]}]}\n' > only_empty.jsonl
# A 20 MB sample (far beyond 512 tokens) and a line over the 32 MiB limit, each before a good one.
{ printf '{"id": "big", "context": "'; yes 'Lily had a red ball.' | head -c 20000000 | tr '\n' ' '
  printf '", "metric": "qa_f1", "turns": [{"question": "q", "answers": ["a"]}]}\n'; } > big.jsonl
cat ok.jsonl >> big.jsonl
{ printf '{"id": "long", "context": "'; head -c 34000000 /dev/zero | tr '\0' 'a'
  printf '", "metric": "qa_f1", "turns": [{"question": "q", "answers": ["a"]}]}\n'; } > long.jsonl
cat ok.jsonl >> long.jsonl
truncate -s 300M huge.jsonl
mkfifo fifo
# config.json variants in otherwise empty --out folders.
model_ok='{"path": "m", "size": 1, "hash": "h", "scheme": "s"}'
mkdir cfg_model5 cfg_size cfg_press cfg_deep cfg_text
printf '{"format": "primekv-eval-config-1", "model": 5, "settings": {}}\n' > cfg_model5/config.json
printf '{"model": {"path": "m", "size": "big", "hash": "h", "scheme": "s"}, "settings": {}}\n' \
  > cfg_size/config.json
printf '{"model": %s, "settings": {}, "presses": {"knorm": 5}}\n' "$model_ok" > cfg_press/config.json
{ head -c 5000 /dev/zero | tr '\0' '['; } > cfg_deep/config.json
printf 'not json\n' > cfg_text/config.json
# A real folder, then rows of wrong types and a deeply nested line appended to its results.
common="-m $S --samples 1 --length 300 --max-new-tokens 4 -q --tasks niah_single_1 --presses none"
"$BIN" eval $common --out res_bad
printf '{"task": 5, "id": "x", "press": "none", "ratio": 0, "turn": 0, "turns": 1, "score": 1}\n' \
  >> res_bad/results.jsonl
{ head -c 3000 /dev/zero | tr '\0' '['; echo; } >> res_bad/results.jsonl
# Full disk: a 64 KiB tmpfs (needs root; skipped where mounting is not allowed). A first run
# fits; once the disk is full the config rewrite fails without leaving its temporary, and with
# one page free the results stop at the first unit that cannot be written.
cat > fulldisk.sh <<'SCRIPT'
set -u
D="$T/full"
mkdir -p "$D"
mount -t tmpfs -o size=64k tmpfs "$D" 2> /dev/null || { echo "no tmpfs: skipped"; exit 0; }
trap 'umount "$D"' EXIT
c="-m $S --samples 1 --length 300 --max-new-tokens 4 -q --tasks niah_single_1"
"$BIN" eval $c --presses none --out "$D/o" || exit 1
rm -f "$D"/o/plot_* "$D/o/report.md" "$D/o/results.csv"
i=0
while dd if=/dev/zero of="$D/f$i" bs=4k count=1 2> /dev/null; do i=$((i + 1)); done
rm -f "$D/f$i"
"$BIN" eval $c --presses none,knorm --ratios 0.5 --out "$D/o" 2> "$T/full1.err" && exit 1
grep -q "config.json': write failed: No space left on device" "$T/full1.err" || exit 1
! ls "$D/o" | grep -q '^config\.json\.' || exit 1  # no temporary left behind
rm -f "$D/f$((i - 1))"
"$BIN" eval $c --presses none,knorm,random,streamingllm --ratios 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9 \
  --out "$D/o" 2> "$T/full2.err" && exit 1
grep -q "results.jsonl: write failed: No space left on device" "$T/full2.err" || exit 1
! grep -q "units run" "$T/full2.err"
SCRIPT
