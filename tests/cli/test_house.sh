#!/usr/bin/env bash
# test_house.sh — the house rules of harness/ and model/ hold (issue 36), and
# their checker can fail.
#
# tests/house/check.py: no file over 1,200 lines unless its header says why it
# stays whole; at most 10 functions over 80 lines, each with a "reads best
# whole" comment; no dependency circle between files (nm over the objects of
# the build the binary came from). The planted cases run the checker over a
# copy of the tree with one defect each, and must be refused.
# Usage: bash tests/cli/test_house.sh ./vtlab      (objects: the binary's build
# directory when it holds harness/*.o, else $BUILD, else build/)
set -u
VTLAB=${1:-./vtlab}
. tests/cli/lib.sh
B=$(dirname "$VTLAB")
ls "$B"/harness/*.o >/dev/null 2>&1 || B=${BUILD:-build}
check() { local name=$1; shift; if "$@" >/dev/null 2>&1; then ok "$name"; else not_ok "$name" "failed: $*"; fi; }
W=$(mktemp -d /tmp/vtlab-house.XXXXXX)
trap 'rm -rf "$W"' EXIT
CHECK="python3 tests/house/check.py"

out=$($CHECK "$B" 2>&1); rc=$?
check "the tree keeps the house rules ($B)" test "$rc" -eq 0
[ "$rc" -eq 0 ] || echo "$out" | sed 's/^/#   /'

plant() {   # a copy of harness/ and model/ at $W/t
  rm -rf "$W/t" && mkdir -p "$W/t" && cp -r harness model "$W/t/"
}
long_fn() {   # $1 name, $2 lines of body
  printf 'int %s(int x) {\n' "$1"; for i in $(seq "$2"); do printf '    x += %d;\n' "$i"; done; printf '    return x;\n}\n'
}

plant; long_fn planted_long 90 >>"$W/t/harness/util.c"
out=$($CHECK "$B" --root "$W/t" 2>&1); rc=$?
check "a 93-line function without a why-comment is refused" test "$rc" -eq 1
check "  ... and named" grep -q "harness/util.c:.*planted_long is 93 lines" <<<"$out"

plant; { echo "/* planted: it reads best whole, for the test */"; long_fn planted_ok 90; } >>"$W/t/harness/util.c"
out=$($CHECK "$B" --root "$W/t" 2>&1); rc=$?
check "the same function with a why-comment passes" test "$rc" -eq 0

plant; for i in $(seq 11); do { echo "/* reads best whole (planted) */"; long_fn planted_$i 85; } >>"$W/t/model/util_planted.c"; done
out=$($CHECK "$B" --root "$W/t" 2>&1); rc=$?
check "more than 10 long functions are refused" grep -q "functions over 80 lines (at most 10)" <<<"$out"

plant; for i in $(seq 1300); do echo "/* line $i */"; done >>"$W/t/harness/cli.c"
out=$($CHECK "$B" --root "$W/t" 2>&1); rc=$?
check "a file over 1,200 lines is refused" grep -q "harness/cli.c: .* lines (over 1200" <<<"$out"
plant; { printf '/*\n * planted: this file stays whole because the test says so.\n */\n'; cat harness/cli.c; for i in $(seq 1300); do echo "/* line $i */"; done; } >"$W/t/harness/cli.c"
out=$($CHECK "$B" --root "$W/t" 2>&1)
if grep -q "harness/cli.c:" <<<"$out"; then not_ok "  ... unless its header says why it stays whole" "$out"; else ok "  ... unless its header says why it stays whole"; fi

# a circle: two objects that call each other
plant; mkdir -p "$W/b/harness" "$W/b/model"
printf 'int house_b(int);\nint house_a(int x) { return x ? house_b(x - 1) : 0; }\n' >"$W/t/harness/ha.c"
printf 'int house_a(int);\nint house_b(int x) { return x ? house_a(x - 1) : 1; }\n' >"$W/t/harness/hb.c"
cc -c "$W/t/harness/ha.c" -o "$W/b/harness/ha.o" && cc -c "$W/t/harness/hb.c" -o "$W/b/harness/hb.o"
out=$($CHECK "$W/b" --root "$W/t" 2>&1); rc=$?
check "two files that call each other are a circle" grep -q "dependency circle between files: harness/ha.c <-> harness/hb.c" <<<"$out"
finish
