#!/usr/bin/env bash
# The chat templates llama.cpp ships (models/templates/*.jinja) for
# TokenizerParity.LlamaCppTemplatesAreRecognised, without a llama.cpp checkout: the npm package
# node-llama-cpp carries a git bundle of a llama.cpp release, and only the files
# tests/tokenizer/data/chat.json names are read out of it. The test checks each file's FNV-1a key
# against the one recorded from llama.cpp c392e509, so a different copy fails rather than passes.
#
#   tools/tokref/llamacpp_templates.sh [OUT]   (default OUT: tools/tokref/llamacpp)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/llamacpp}"
pkg="node-llama-cpp@3.22.1"
sha256="a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f"
files=$(/usr/bin/python3 -c '
import json, sys
for t in json.load(open(sys.argv[1]))["templates"].values():
    if "llamacpp" in t and "entry" not in t: print(t["llamacpp"])' "$here/../../tests/tokenizer/data/chat.json")

have_all=1
for f in $files; do [ -s "$out/$f" ] || have_all=0; done
[ "$have_all" = 0 ] || { echo "llamacpp_templates: $out is complete"; exit 0; }

command -v npm >/dev/null || { echo "llamacpp_templates: npm is needed" >&2; exit 1; }
command -v git >/dev/null || { echo "llamacpp_templates: git is needed" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "llamacpp_templates: npm pack $pkg (about 35 MB)"
(cd "$work" && npm pack "$pkg" --silent --loglevel=error >/dev/null)
tgz=$(ls "$work"/node-llama-cpp-*.tgz)
echo "$sha256  $tgz" | sha256sum -c --quiet - ||
  { echo "llamacpp_templates: $pkg is not the tarball this script pins" >&2; exit 1; }
tar xzf "$tgz" -C "$work" package/llama/gitRelease.bundle
git clone -q --bare "$work/package/llama/gitRelease.bundle" "$work/llama.git"
for f in $files; do
  mkdir -p "$(dirname "$out/$f")"
  git --git-dir="$work/llama.git" show "HEAD:$f" >"$out/$f.tmp"
  mv "$out/$f.tmp" "$out/$f"
done
echo "llamacpp_templates: wrote $(echo $files | wc -w) templates under $out"
