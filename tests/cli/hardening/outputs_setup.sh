#!/bin/sh
# Fixtures for outputs.table: paths that exist and are not regular files (a FIFO, a directory,
# symbolic links to a device and to a file), and press-scores folders whose outputs cannot be
# written. Usage: outputs_setup.sh DIR BIN MODEL
set -eu
T="$1"; BIN="$2"
cd "$T"
mkfifo fifo
mkdir dir
ln -s /dev/null null_link
printf 'keep\n' > target
ln -s target file_link
# A convert manifest of one F32 tensor.
head -c 16 /dev/zero > t.bin
printf '{"data": "t.bin", "metadata": [], "tensors": [{"name": "t", "ne": [4], "offset": 0}]}\n' \
  > m.json
"$BIN" make-model --layers 1 --d-model 64 --heads 2 --kv-heads 1 --head-dim 32 --ffn 64 \
  --vocab 300 -o model.gguf
# press-scores: one KV head of 8 entries of dimension 4, positions 0..7.
mkdir scores
printf '{"n": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4}\n' > scores/meta.json
head -c 128 /dev/zero > scores/keys.f32
head -c 128 /dev/zero > scores/values.f32
for p in 0 1 2 3 4 5 6 7; do printf "\\00$p\\000\\000\\000"; done > scores/positions.i32
for d in kept_dir scores_full kept_full scores_fifo; do
  mkdir "$d"
  cp scores/meta.json scores/keys.f32 scores/values.f32 scores/positions.i32 "$d/"
done
mkdir kept_dir/kept.json
ln -s /dev/full scores_full/scores.f32
ln -s /dev/full kept_full/kept.json
mkfifo scores_fifo/scores.f32
# eval --out folders whose results.jsonl is a link to a device, and whose report.md is a FIFO.
mkdir eval_fifo eval_link
mkfifo eval_fifo/report.md
ln -s /dev/null eval_link/results.jsonl
