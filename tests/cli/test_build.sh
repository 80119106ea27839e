#!/usr/bin/env bash
# The build's CUDA detection (Makefile, `make cuda-info`). CI's machine has
# /usr/local/bin/nvcc as a wrapper script that execs the real toolkit's nvcc and
# keeps its libraries in lib/, not lib64/: deriving the toolkit from nvcc's path
# linked against a directory that does not exist and broke the build there.
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
OUT_FILE=$W/out; ERR=$W/err

# fake_toolkit DIR [LIBDIR]: a toolkit whose nvcc reports its TOP like the real
# one does under -dryrun, with an (empty) libcublas.so in LIBDIR if given
fake_toolkit() {
  mkdir -p "$1/bin"
  printf '#!/bin/sh\necho "#\\$ TOP=%s/bin/.." >&2\n' "$1" >"$1/bin/nvcc"; chmod +x "$1/bin/nvcc"
  if [ -n "${2:-}" ]; then mkdir -p "$1/$2"; : >"$1/$2/libcublas.so"; fi
}
wrapper() { mkdir -p "$1"; printf '#!/bin/sh\nexec %s "$@"\n' "$2" >"$1/nvcc"; chmod +x "$1/nvcc"; }
# the inner make must not inherit an outer `make NO_CUDA=1 test`'s flags (MAKEFLAGS) or NO_CUDA
info() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u NO_CUDA PATH="$1:/usr/bin:/bin" make -s --no-print-directory cuda-info 2>&1; }

fake_toolkit "$W/tk" lib
wrapper "$W/wrap" "$W/tk/bin/nvcc"
got=$(info "$W/wrap")
if echo "$got" | grep -qx "CUDA_LIBDIR=$W/tk/lib" && echo "$got" | grep -qx "CUDA_HOME=$W/tk"; then
  ok "nvcc wrapper outside the toolkit: libraries found in the toolkit's lib/"
else not_ok "nvcc wrapper" "$(echo $got)"; fi

fake_toolkit "$W/tk64" lib64
got=$(info "$W/tk64/bin")
echo "$got" | grep -qx "CUDA_LIBDIR=$W/tk64/lib64" && ok "nvcc in the toolkit: lib64/ preferred" || not_ok "nvcc in toolkit" "$(echo $got)"

fake_toolkit "$W/bare"
got=$(info "$W/bare/bin")
if echo "$got" | grep -qx "NVCC=" && echo "$got" | grep -q "building CPU-only"; then
  ok "nvcc without libcublas.so: CPU-only build, said so"
else not_ok "nvcc without libraries" "$(echo $got)"; fi

# the real toolkit on this machine, if any, reached only through a wrapper
real=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -n "$real" ]; then
  wrapper "$W/wrap-real" "$real"
  got=$(info "$W/wrap-real")
  dir=$(echo "$got" | sed -n 's/^CUDA_LIBDIR=//p')
  if [ -n "$dir" ] && [ -e "$dir/libcublas.so" ] && [ -e "$dir/libcudart.so" ]; then
    ok "this machine's nvcc through a wrapper: libcublas.so and libcudart.so in $dir"
  else not_ok "real nvcc via wrapper" "$(echo $got)"; fi
else
  echo "ok - # SKIP no nvcc on this machine"
fi

# the seam (docs/architecture.md): the harness includes only model/vt.h of the model library
bad=$(grep -nE '#include +"model/' harness/*.c harness/*.h | grep -v '"model/vt.h"')
[ -z "$bad" ] && ok "harness/ includes no model header but model/vt.h" || not_ok "the harness/model seam" "$bad"
finish
