#!/usr/bin/env bash
# Builds the .deb of `cmake --install` (packaging/): installs the Debian packages the build and
# CPack need (scripts/setup.sh --package), configures PRESET for the /usr prefix, builds
# what the package holds (the CLI, the C API's library, the man page) and runs CPack. The last
# line printed is the .deb's path, build/<preset>/package/primekv_<version>_<arch>.deb.
# Usage: scripts/package.sh [preset]   (default release; any preset built with the CLI)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
t0=$(date +%s)
bash scripts/setup.sh --package
# /usr, as Debian packages; CPack installs what was built, not first everything else (tests).
cmake --preset "$preset" -G Ninja -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
  >/dev/null
cmake --build "build/$preset" -j "$(nproc)" --target primekv_cli primekv_c primekv_docs
out="build/$preset/package"
rm -rf "$out"
cpack --config "build/$preset/CPackConfig.cmake" -B "$out" >"$out.log" 2>&1 ||
  { cat "$out.log" >&2; exit 1; }
rm -rf "$out/_CPack_Packages"
deb=$(ls "$out"/*.deb)
echo "-- package: $(du -h "$deb" | cut -f1) in $(($(date +%s) - t0)) s"
echo "$deb"
