#!/bin/sh
# Fixtures for hostile.table: bad manifests, special files, and GGUF models whose metadata the
# loader must refuse. Usage: hostile_setup.sh DIR BIN MODEL
set -eu
T="$1"; BIN="$2"
cd "$T"
mkfifo fifo
mkdir adir
head -c 4096 /dev/zero > tensors.bin
m() { printf '%s\n' "$2" > "$1.json"; }
m array '[]'
m null 'null'
m five '5'
m data5 '{"data":5}'
m ne_empty '{"metadata":[],"tensors":[{"name":"a","ne":[],"offset":0}]}'
m u8_300 '{"metadata":[{"key":"x","type":"uint8","value":300}],"tensors":[]}'
m u32_neg '{"metadata":[{"key":"x","type":"uint32","value":-1}],"tensors":[]}'
m i8_big '{"metadata":[{"key":"x","type":"int8","value":-1000}],"tensors":[]}'
m align0 '{"metadata":[{"key":"general.alignment","type":"uint32","value":0}],"tensors":[]}'
m align3 '{"metadata":[{"key":"general.alignment","type":"uint32","value":3}],"tensors":[]}'
m align64 '{"metadata":[{"key":"general.alignment","type":"uint64","value":32}],"tensors":[]}'
m empty_key '{"metadata":[{"key":"","type":"uint8","value":1}],"tensors":[]}'
m f32_big '{"metadata":[{"key":"f","type":"float32","value":1e300}],"tensors":[]}'
m dim_frac '{"metadata":[],"tensors":[{"name":"a","ne":[2.7],"offset":0}]}'
m dup_key '{"metadata":[{"key":"a","type":"bool","value":true},{"key":"a","type":"bool","value":false}],"tensors":[]}'
m past_end '{"metadata":[],"tensors":[{"name":"a","ne":[2048],"offset":0}]}'
m good '{"metadata":[{"key":"general.architecture","type":"string","value":"llama"}],"tensors":[{"name":"a","ne":[4,4],"offset":0}]}'
m no_data '{"data":"missing.bin","metadata":[],"tensors":[]}'
# Models whose config the loader must refuse (no tensors needed: config is read first).
cfg() {  # name, extra metadata entries
  printf '{"metadata":[{"key":"general.architecture","type":"string","value":"llama"},
{"key":"llama.block_count","type":"uint32","value":1},
{"key":"llama.embedding_length","type":"uint32","value":64},
{"key":"llama.feed_forward_length","type":"uint32","value":64},
{"key":"llama.attention.head_count","type":"uint32","value":4}%s],"tensors":[]}\n' "$2" > "$1.json"
  "$BIN" convert --manifest "$1.json" -o "$1.gguf"
}
cfg ctx_u32max ',{"key":"llama.context_length","type":"uint32","value":4294967295}'
cfg ctx_u64max ',{"key":"llama.context_length","type":"uint64","value":18446744073709551615}'
cfg ctx_zero ',{"key":"llama.context_length","type":"uint32","value":0}'
cfg keylen_big ',{"key":"llama.attention.key_length","type":"uint32","value":100000}'
cfg kv_heads_big ',{"key":"llama.attention.head_count_kv","type":"uint32","value":4294967295}'
printf '{"metadata":[{"key":"general.architecture","type":"string","value":"llama"},
{"key":"llama.block_count","type":"uint32","value":1},
{"key":"llama.embedding_length","type":"uint32","value":64},
{"key":"llama.feed_forward_length","type":"uint32","value":64},
{"key":"llama.attention.head_count","type":"uint32","value":65536},
{"key":"llama.attention.key_length","type":"uint32","value":4096}],"tensors":[]}\n' > heads_overflow.json
"$BIN" convert --manifest heads_overflow.json -o heads_overflow.gguf
printf '{"metadata":[{"key":"general.architecture","type":"string","value":"\\u001b[31m\\u00ffred"}],"tensors":[]}\n' > arch_esc.json
"$BIN" convert --manifest arch_esc.json -o arch_esc.gguf
# A model whose final norm weights are +inf: every logit is NaN or infinite.
"$BIN" make-model --layers 1 --d-model 64 --heads 2 --kv-heads 1 --head-dim 32 --ffn 64 \
  --vocab 300 -o nan.gguf
data=$("$BIN" inspect nan.gguf | awk '/^data offset:/ {print $3}')
off=$("$BIN" inspect nan.gguf | awk '$1 == "output_norm.weight" {print $4}')
i=0
while [ "$i" -lt 64 ]; do printf '\000\000\200\177'; i=$((i + 1)); done > inf.bin
dd if=inf.bin of=nan.gguf bs=1 seek=$((data + off)) conv=notrunc 2> /dev/null
# A press spec nested 5,000 deep.
i=0; spec=""
while [ "$i" -lt 5000 ]; do spec="${spec}adakv:"; i=$((i + 1)); done
printf '%ssnapkv' "$spec" > deep_spec
mkdir scores && printf '{"n": "many"}\n' > scores/meta.json
printf 'some text\n' > text.txt
