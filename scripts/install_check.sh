#!/usr/bin/env bash
# The installed package, checked as a user meets it (CI's install stage; docs/install.md):
#  1. scripts/package.sh PRESET writes the .deb; its listing holds every part and lintian
#     reports no errors.
#  2. In a scratch root holding only the unpacked .deb (dpkg-deb -x): a C program built with
#     pkg-config and one built with CMake's find_package answer the demo question from the
#     installed default model; Python imports the module from another folder, finds its library
#     with no LD_LIBRARY_PATH, and generates; systemd-analyze verifies the unit; `primekv serve`
#     started with the unit's ExecStart (paths moved into the root, a free loopback port) answers.
#  3. On this machine, as root: dpkg -i, the same programs built with no paths given, pip's
#     install of python/ loading the installed library, the unit's command as its own account
#     saving a session to /var/lib/primekv; then dpkg -r leaves only that state directory and
#     dpkg --purge nothing. Not root: through sudo -n (`install_check.sh --machine DEB`). Where
#     neither works, or primekv is already installed here, it is skipped with a message; under
#     CI=true that is a failure.
# Usage: scripts/install_check.sh [preset]   (default release; CI passes ci)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
fail() { echo "install_check: FAIL: $*" >&2; exit 1; }
step() { echo "-- $*"; }
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
want_answer=4829163
work=$(mktemp -d /tmp/primekv-install.XXXXXX)
chmod 755 "$work"
server_pid=""
installed_here=0
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  # A failed check does not leave the package on the machine.
  if [ "$installed_here" = 1 ] && dpkg-query -W primekv >/dev/null 2>&1; then
    dpkg --purge primekv >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# consumer NAME CMD...: runs a consumer and checks it printed the document's answer.
consumer() {
  local name=$1 out
  shift
  out=$("$@" 2>&1) || fail "$name: $out"
  grep -q "is $want_answer" <<<"$out" || fail "$name did not answer $want_answer: $out"
  step "$name: $out"
}

# build_consumers LABEL MODEL DOC [SYSROOT]: tests/install/consumer.c built with pkg-config and
# with CMake's find_package (against SYSROOT when given), each run on MODEL and DOC.
build_consumers() {
  local label=$1 model=$2 doc=$3 sysroot=${4:-} flags found
  local -a pc_env=() run_env=() cmake_args=()
  if [ -n "$sysroot" ]; then
    pc_env=(PKG_CONFIG_SYSROOT_DIR="$sysroot" PKG_CONFIG_LIBDIR="$sysroot/usr/lib/$arch/pkgconfig"
            PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1)
    # The loader knows the system's folders, not the scratch root's.
    run_env=(LD_LIBRARY_PATH="$sysroot/usr/lib/$arch")
    cmake_args=(-DCMAKE_PREFIX_PATH="$sysroot/usr")
  fi
  flags=$(env "${pc_env[@]}" pkg-config --cflags --libs primekv)
  # shellcheck disable=SC2086  # the flags are words
  cc -std=c11 -Wall -Wextra -pedantic -Werror tests/install/consumer.c $flags -o "$work/pc_$label"
  consumer "pkg-config consumer, $label ($flags)" env "${run_env[@]}" "$work/pc_$label" "$model" "$doc"
  cmake -S tests/install -B "$work/cmake_$label" -G Ninja "${cmake_args[@]}" >"$work/cmake.log" ||
    { cat "$work/cmake.log"; fail "the CMake consumer did not configure"; }
  found=$(sed -n 's/^primekv_DIR:PATH=//p' "$work/cmake_$label/CMakeCache.txt")
  [[ "$found" == "$sysroot/usr/lib/$arch/cmake/primekv" ]] || fail "find_package found $found"
  cmake --build "$work/cmake_$label" >/dev/null
  consumer "CMake consumer, $label ($found)" env "${run_env[@]}" "$work/cmake_$label/consumer" \
    "$model" "$doc"
}

# python_answer DIR MODEL DOC [PYTHONPATH]: imports the module in DIR with no LD_LIBRARY_PATH or
# PRIMEKV_LIB; prints where the module and its library are, and the document's answer.
python_answer() {
  local -a env_args=(-u LD_LIBRARY_PATH -u PRIMEKV_LIB -u PYTHONPATH)
  [ -z "${4:-}" ] || env_args+=("PYTHONPATH=$4")
  (cd "$1" && env "${env_args[@]}" /usr/bin/python3 - "$2" "$3" <<'PY'
import sys
import primekv
from primekv import _lib
model_path, doc_path = sys.argv[1:3]
m = primekv.Model(model_path)
s = m.session(press="primekv", ratio=0.25)
s.feed_context(m.tokenize(open(doc_path).read() + "\nWhat is the special magic number for "
                          "silver-lantern?\nThe special magic number for silver-lantern is"))
print(primekv.__file__, _lib.raw_lib()._name, repr(m.detokenize(s.generate(12)).split("\n")[0]))
PY
  )
}

# serve_as_unit CMDLINE STATE_DIR USER: the unit's ExecStart as the unit runs it (its user when
# root, its umask and working directory) on a free loopback port; one chat request, whose
# session must be saved in STATE_DIR.
serve_as_unit() {
  local cmdline=$1 state=$2 user=$3 port="$work/run/port" reply session tokens saved
  cmdline=${cmdline/--port 8080/--port 0 --port-file $port}
  rm -rf "$work/run"
  mkdir "$work/run"
  local -a run=()
  if [ "$(id -u)" -eq 0 ]; then
    chown "$user" "$work/run"
    run=(setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups --no-new-privs --)
  fi
  # shellcheck disable=SC2086  # the unit's command line is words
  (cd "$state" && umask 0077 && exec "${run[@]}" $cmdline) >"$work/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    [ -s "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log"; fail "serve exited"; }
    sleep 0.1
  done
  [ -s "$port" ] || { cat "$work/serve.log"; fail "serve did not start"; }
  reply=$(/usr/bin/python3 - "$(cat "$port")" <<'PY'
import json, sys, urllib.request
body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "temperature": 0,
                   "max_tokens": 8}).encode()
req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1], body,
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=120))
print(r["session"], r["usage"]["completion_tokens"], r["primekv"]["saved"])
PY
  ) || { cat "$work/serve.log"; fail "the request to serve failed"; }
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  read -r session tokens saved <<<"$reply"
  if [ "$saved" != True ] || [ ! -f "$state/$session.pkvs" ]; then
    fail "serve did not save session $session in $state: $(ls -la "$state")"
  fi
  step "serve as the unit ($cmdline): session $session, $tokens tokens, saved as $state/$session.pkvs"
}

# ---- 1. the .deb: its parts and lintian
check_deb() {
  local deb=$1 listing lintian_out want
  listing=$(dpkg-deb -c "$deb")
  for want in ./usr/bin/primekv "./usr/lib/$arch/libprimekv_c.so.0.1.0" \
      "./usr/lib/$arch/libprimekv_c.so.0 -> libprimekv_c.so.0.1.0" \
      "./usr/lib/$arch/libprimekv_c.so -> libprimekv_c.so.0" ./usr/include/primekv.h \
      "./usr/lib/$arch/pkgconfig/primekv.pc" "./usr/lib/$arch/cmake/primekv/primekvConfig.cmake" \
      "./usr/lib/$arch/cmake/primekv/primekvTargets.cmake" \
      ./usr/lib/python3/dist-packages/primekv/__init__.py \
      ./usr/lib/python3/dist-packages/primekv/_libpath.py \
      ./usr/share/man/man1/primekv.1.gz ./lib/systemd/system/primekv.service \
      ./usr/share/primekv/models/primekv-retrieval.gguf ./usr/share/doc/primekv/copyright; do
    grep -qF -- " $want" <<<"$listing" || fail "$deb does not hold $want"
  done
  step "$(basename "$deb"): $(wc -l <<<"$listing") entries, every part present"
  lintian_out=$(lintian --fail-on none "$deb" 2>&1 | grep -v '^running with root privileges' || true)
  [ -z "$lintian_out" ] || printf '%s\n' "$lintian_out" | sed 's/^/   lintian: /'
  if grep -q '^E: ' <<<"$lintian_out"; then fail "lintian reports errors"; fi
  step "lintian: $(grep -c '^E: ' <<<"$lintian_out" || true) errors, $(grep -c '^W: ' <<<"$lintian_out" || true) warnings"
}

# ---- 2. a scratch root holding only the package
scratch_root() {
  local deb=$1 root="$work/root" soname py py_module py_lib verify exec_start cmd user
  dpkg-deb -x "$deb" "$root"
  local model="$root/usr/share/primekv/models/primekv-retrieval.gguf"
  local doc="$root/usr/share/primekv/examples/demo-context.txt"
  soname=$(objdump -p "$root/usr/lib/$arch/libprimekv_c.so.0.1.0" | awk '$1 == "SONAME" {print $2}')
  [ "$soname" = libprimekv_c.so.0 ] || fail "the library's soname is '$soname'"
  step "libprimekv_c.so.0.1.0: SONAME $soname"
  build_consumers scratch "$model" "$doc" "$root"

  mkdir -p "$work/elsewhere"
  py=$(python_answer "$work/elsewhere" "$model" "$doc" "$root/usr/lib/python3/dist-packages") ||
    fail "python: $py"
  read -r py_module py_lib _ <<<"$py"
  [[ "$py_module" == "$root/"* && "$py_lib" == "$root/usr/lib/$arch/libprimekv_c.so.0" ]] ||
    fail "python loaded $py_module with $py_lib, not the scratch root's"
  grep -q "$want_answer" <<<"$py" || fail "python did not answer $want_answer: $py"
  step "python, scratch (from $work/elsewhere, no LD_LIBRARY_PATH): $py"

  # The root holds no systemd, so the only finding allowed is a target every service is
  # ordered after (sysinit.target); --man=no: the man page is not installed outside the root.
  verify=$(systemd-analyze verify --man=no --root="$root" /lib/systemd/system/primekv.service 2>&1 ||
    true)
  if grep -v 'Failed to create primekv.service/start: Unit [a-z.-]*\.target not found\.$' \
      <<<"$verify" | grep -q .; then
    fail "systemd-analyze verify: $verify"
  fi
  step "systemd-analyze verify --root (no systemd in the root): ${verify:-no findings}"
  step "systemd-analyze security: $(systemd-analyze security --offline=yes --root="$root" \
    /lib/systemd/system/primekv.service 2>&1 | tail -n 1)"

  exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/primekv.service")
  mkdir -m 0750 "$work/state"
  user=$(id -un)
  if [ "$(id -u)" -eq 0 ]; then
    user=nobody
    chown nobody:nogroup "$work/state"
  fi
  cmd=${exec_start//\/usr\//$root\/usr\/}
  serve_as_unit "${cmd//\/var\/lib\/primekv/$work/state}" "$work/state" "$user"
}

# ---- 3. installed on this machine, then removed (as root)
# What exists outside the places apt, dpkg and other processes write anyway.
snapshot() {
  find /usr /etc /var/lib /opt /lib -xdev 2>/dev/null |
    grep -Ev '^/var/lib/(dpkg|apt|systemd/(catalog|coredump))(/|$)|^/etc/(ld\.so\.cache|passwd-|group-|shadow-|gshadow-)$' |
    sort -u
}

on_machine() {
  local deb=$1 py left man_check verify
  local model=/usr/share/primekv/models/primekv-retrieval.gguf
  local doc=/usr/share/primekv/examples/demo-context.txt
  snapshot >"$work/before"
  installed_here=1
  dpkg -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i"; }
  step "dpkg -i: $(command -v primekv): $(primekv --version); account $(getent passwd primekv | cut -d: -f1,6,7)"
  build_consumers installed "$model" "$doc"
  mkdir -p "$work/elsewhere"
  py=$(python_answer / "$model" "$doc") || fail "python: $py"
  [[ "$py" == "/usr/lib/python3/dist-packages/primekv/__init__.py /usr/lib/$arch/libprimekv_c.so.0 "* ]] ||
    fail "python did not load the installed module and library: $py"
  step "python, installed (from /, no PYTHONPATH): $py"
  # pip's install of python/ (Debian's pip and setuptools, no download) finds the system's library.
  cp -r python "$work/python_src"
  /usr/bin/python3 -m pip install --quiet --no-cache-dir --no-build-isolation --no-deps --no-index \
    --target "$work/pip" "$work/python_src" >"$work/pip.log" 2>&1 ||
    { cat "$work/pip.log"; fail "pip install"; }
  py=$(python_answer "$work/elsewhere" "$model" "$doc" "$work/pip") || fail "python (pip): $py"
  [[ "$py" == "$work/pip/"* ]] || fail "python did not import pip's copy: $py"
  step "python, pip install --no-build-isolation: $py"
  # Documentation=man:primekv(1) is checked by running man, unless this system drops man pages.
  man_check=yes
  [ -e /usr/share/man/man1/primekv.1.gz ] && command -v man >/dev/null || man_check=no
  verify=$(systemd-analyze verify --man=$man_check /lib/systemd/system/primekv.service 2>&1) ||
    fail "systemd-analyze verify: $verify"
  step "systemd-analyze verify --man=$man_check /lib/systemd/system/primekv.service: ${verify:-no findings}"
  serve_as_unit "$(sed -n 's/^ExecStart=//p' /lib/systemd/system/primekv.service)" /var/lib/primekv \
    primekv
  step "/var/lib/primekv: $(stat -c '%A %U:%G' /var/lib/primekv)"

  dpkg -r primekv >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -r"; }
  snapshot >"$work/removed"
  left=$(comm -13 "$work/before" "$work/removed")
  step "dpkg -r leaves: $(tr '\n' ' ' <<<"$left")(and dpkg's record of the package, for its purge)"
  if grep -v '^/var/lib/primekv\(/\|$\)' <<<"$left" | grep -q .; then fail "dpkg -r left files behind"; fi
  [ "$(stat -c %U /var/lib/primekv)" = primekv ] || fail "/var/lib/primekv is not primekv's"
  dpkg --purge primekv >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg --purge"; }
  installed_here=0
  snapshot >"$work/purged"
  left=$(comm -13 "$work/before" "$work/purged")
  [ -z "$left" ] || fail "dpkg --purge left: $left"
  ! getent passwd primekv >/dev/null || fail "dpkg --purge left the primekv account"
  step "dpkg --purge leaves nothing (no files, no primekv account)"
}

if [ "${1:-}" = --machine ]; then
  on_machine "$2"
  exit 0
fi
preset="${1:-release}"
t0=$(date +%s)
# (tee >(cat >&2): tee /dev/stderr would reopen the log file a run is written to, truncating it)
deb=$(bash scripts/package.sh "$preset" | tee >(cat >&2) | tail -n 1)
t1=$(date +%s)
check_deb "$deb"
t2=$(date +%s)
scratch_root "$deb"
t3=$(date +%s)
if dpkg-query -W -f='${Status}' primekv 2>/dev/null | grep -q ' installed$'; then
  skip="primekv is already installed here (dpkg --purge primekv, then run this again)"
elif [ "$(id -u)" -eq 0 ]; then
  on_machine "$deb"
elif sudo -n true 2>/dev/null; then
  sudo -n bash scripts/install_check.sh --machine "$deb"
else
  skip="not root, and sudo -n is refused"
fi
if [ -n "${skip:-}" ]; then
  [ "${CI:-}" != true ] || fail "the install on this machine is needed under CI: $skip"
  step "skipped dpkg -i / -r / --purge on this machine: $skip"
fi
echo "-- install check: package $((t1 - t0)) s, listing and lintian $((t2 - t1)) s, scratch root $((t3 - t2)) s, on this machine $(($(date +%s) - t3)) s"
