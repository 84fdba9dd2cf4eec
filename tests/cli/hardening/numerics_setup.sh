#!/bin/sh
# Fixtures for numerics.table: small models with NaN, infinite or overflowing values where they
# enter attention (patched in place with dd at offsets from `primekv inspect`), and press-scores
# folders. Usage: numerics_setup.sh DIR BIN MODEL
set -eu
T="$1"; BIN="$2"
cd "$T"
shape="--layers 1 --d-model 64 --heads 2 --kv-heads 1 --head-dim 32 --ffn 64 --vocab 300"
# shellcheck disable=SC2086
"$BIN" make-model $shape -o base.gguf
# shellcheck disable=SC2086
"$BIN" make-model $shape --rope-scaling llama3 -o rope.gguf
# shellcheck disable=SC2086
"$BIN" make-model $shape --rope-base 1e-45 -o tiny_base.gguf

# repeat BYTES COUNT: COUNT copies of a 4-byte little-endian float given as printf escapes.
repeat() {
  i=0
  while [ "$i" -lt "$2" ]; do printf "$1"; i=$((i + 1)); done
}
# patch SRC DST TENSOR FLOAT_BYTES: DST is SRC with every element of TENSOR (F32) set to FLOAT.
patch() {
  cp "$1" "$2"
  data=$("$BIN" inspect "$2" | awk '/^data offset:/ {print $3}')
  off=$("$BIN" inspect "$2" | awk -v t="$3" '$1 == t {print $(NF - 1)}')
  bytes=$("$BIN" inspect "$2" | awk -v t="$3" '$1 == t {print $NF}')
  repeat "$4" $((bytes / 4)) > patch.bin
  dd if=patch.bin of="$2" bs=1 seek=$((data + off)) conv=notrunc 2> /dev/null
}
nan='\000\000\300\177'
zero='\000\000\000\000'
big='\312\362\111\161'  # 1e30: finite weights whose query-key products overflow float
patch base.gguf nan_q.gguf blk.0.attn_q.weight "$nan"
patch base.gguf nan_k.gguf blk.0.attn_k.weight "$nan"
patch base.gguf nan_v.gguf blk.0.attn_v.weight "$nan"
patch rope.gguf nan_freqs.gguf rope_freqs.weight "$nan"
patch rope.gguf zero_freqs.gguf rope_freqs.weight "$zero"
patch base.gguf big_q.gguf blk.0.attn_q.weight "$big"
patch big_q.gguf big_qk.gguf blk.0.attn_k.weight "$big"

# 3,000 token ids for a 2,048-token context.
i=0; ids=5
while [ "$i" -lt 2999 ]; do ids="$ids,5"; i=$((i + 1)); done
printf '%s' "$ids" > ids3000

# press-scores folders: one KV head of 8 entries of dimension 4 (zeros), positions 0..7.
mkdir scores
printf '{"n": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4}\n' > scores/meta.json
head -c 128 /dev/zero > scores/keys.f32
head -c 128 /dev/zero > scores/values.f32
for p in 0 1 2 3 4 5 6 7; do printf "\\00$p\\000\\000\\000"; done > scores/positions.i32
mkdir wide
cp scores/keys.f32 scores/values.f32 scores/positions.i32 wide/
# n = 2^32 + 8 must not be read as 8.
printf '{"n": 4294967304, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4}\n' > wide/meta.json
# n_kv_heads = 0 divides n_heads: refused by its bound (0 is an unsigned JSON literal).
mkdir zero_kv
cp scores/keys.f32 scores/values.f32 scores/positions.i32 zero_kv/
printf '{"n": 8, "n_heads": 2, "n_kv_heads": 0, "head_dim": 4}\n' > zero_kv/meta.json
mkdir tiny_base
cp scores/keys.f32 scores/values.f32 scores/positions.i32 tiny_base/
printf '{"n": 8, "n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "rope_base": 1e-300}\n' \
  > tiny_base/meta.json
# About 380 tokens of context for stories260K (context 512).
i=0; text=""
while [ "$i" -lt 90 ]; do text="${text}once upon a time "; i=$((i + 1)); done
printf '%s' "$text" > story.txt

# Issue 55 item 7: press-scores folders with one NaN key, one -inf value.
mkdir nan_keys inf_values
cp scores/meta.json scores/positions.i32 nan_keys/
cp scores/meta.json scores/positions.i32 inf_values/
{ printf "$nan"; head -c 124 /dev/zero; } > nan_keys/keys.f32
cp scores/values.f32 nan_keys/
cp scores/keys.f32 inf_values/
{ head -c 36 /dev/zero; printf '\000\000\200\377'; head -c 88 /dev/zero; } > inf_values/values.f32
# Issue 55 item 12: 64 layers of 8 KV heads of 128: 512 KiB of f16 KV per token, so a context
# of 2^24 tokens needs 8 TiB, more than any machine.
"$BIN" make-model --layers 64 --d-model 64 --heads 8 --kv-heads 8 --head-dim 128 --ffn 64 \
  --vocab 300 -o wide_kv.gguf
