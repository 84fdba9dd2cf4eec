#!/bin/sh
# Fixtures of files.table: sh files_setup.sh DIR BIN MODEL (see ../run_table.sh).
set -eu
T="$1" BIN="$2" S="$3"
cd "$T"
mkfifo fifo
mkdir dir
printf 'keep\n' > target
ln -s target file_link
ln -s missing_target dangling
# Calibration contexts (only `context` is read).
printf '{"id": "c%d", "context": "Lily had a red ball. Tom had a blue kite. The sun was warm and the park was full of children playing.", "metric": "qa_f1", "turns": [{"question": "q", "answers": ["a"]}]}\n' 1 2 > cal.jsonl
printf '{"id": "ok", "context": "Lily had a red ball.", "metric": "qa_f1", "turns": [{"question": "What did Lily have?", "answers": ["ball"]}]}\n' > ok.jsonl
# Two random models of one shape (other weights) and one of another shape.
mm() { "$BIN" make-model --layers 2 --d-model 64 --heads 2 --kv-heads 1 --head-dim 32 --ffn 64 --vocab 300 "$@"; }
mm --seed 1 -o a.gguf
mm --seed 2 -o b.gguf
"$BIN" make-model --layers 3 --d-model 64 --heads 2 --kv-heads 1 --head-dim 32 --ffn 64 --vocab 300 --seed 3 -o c.gguf
"$BIN" calibrate -m a.gguf --tasks jsonl:cal.jsonl --ratios 0.25,0.5,0.75 -o a.budget.json
# The same profile as written before profiles recorded their model.
grep -v '"model":' a.budget.json > a_old.budget.json
# A profile far over the size limit: numbers a parser would read for seconds.
{ printf '{"format": "primekv-budget-profile", "n_layers": 2, "n_kv_heads": 1, "ratios": ['
  yes '0.5,' | head -n 3000000 | tr -d '\n'; printf '0.5], "fractions": []}\n'; } > huge.budget.json
# press-scores folders whose input tensors are FIFOs.
mkdir scores
printf '{"n": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "d_model": 8}\n' > scores/meta.json
head -c 128 /dev/zero > scores/keys.f32
head -c 128 /dev/zero > scores/values.f32
for p in 0 1 2 3 4 5 6 7; do printf "\\00$p\\000\\000\\000"; done > scores/positions.i32
for f in keys window_queries wo; do
  mkdir "fifo_$f"
  cp scores/meta.json scores/keys.f32 scores/values.f32 scores/positions.i32 "fifo_$f/"
  rm -f "fifo_$f/$f.f32"
  mkfifo "fifo_$f/$f.f32"
done
# eval --out folders whose plot files are links to a file, or FIFOs.
for d in plot_link plot_fifo plot_task_link; do mkdir "$d"; done
ln -s ../target plot_link/plot_average.png
mkfifo plot_fifo/plot_average.gp
ln -s ../target plot_task_link/plot_ok.dat
