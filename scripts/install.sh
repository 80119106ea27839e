#!/usr/bin/env bash
# scripts/install.sh — `make install` and `make uninstall` (run from the
# repository root by the Makefile).
#
#   scripts/install.sh install   DEST VTLAB    DEST = $(DESTDIR)$(PREFIX)
#   scripts/install.sh uninstall DEST
#
# install puts in DEST: bin/vtlab, include/vtprobe.h (the engine side of the
# engine protocol), share/vtlab/{configs,experiments,specs} (the shipped
# configs, and the experiments and ledger as examples: vtlab finds its data
# at its own bin/../share/vtlab), share/doc/vtlab/ (README and docs/), and
# share/man/man1/vtlab.1, made from `vtlab --help` by scripts/usage2man.sh.
# Every file it writes, and every directory it had to make, is listed in
# share/vtlab/install-manifest (paths relative to DEST, "f PATH" / "d PATH");
# uninstall removes exactly those: the files, then the directories it made,
# deepest first, when they are empty (a directory holding something else is
# left, and said).
set -euo pipefail
action=${1:?usage: install.sh install DEST VTLAB | uninstall DEST}
dest=${2:?DEST}
manifest=$dest/share/vtlab/install-manifest

uninstall() {
    if [ ! -f "$manifest" ]; then echo "uninstall: $manifest: no install manifest (nothing installed there?)" >&2; exit 2; fi
    local n=0 dirs
    dirs=$(awk '$1 == "d" { print $2 }' "$manifest" | sort -r)
    while read -r kind path; do
        [ "$kind" = f ] || continue
        rm -f "$dest/$path"; n=$((n + 1))
    done < "$manifest"
    rm -f "$manifest"
    for d in $dirs; do
        rmdir "$dest/$d" 2>/dev/null || { [ -d "$dest/$d" ] && echo "uninstall: left $dest/$d (it holds files vtlab did not install)" >&2; } || true
    done
    echo "uninstalled $n file(s) from $dest"
}

# mkdir -p that records each directory it makes
mkdirs() {
    local d=$1 parent
    [ -d "$dest/$d" ] && return 0
    parent=$(dirname "$d")
    [ "$parent" != . ] && mkdirs "$parent"
    mkdir "$dest/$d"
    echo "d $d" >> "$new"
}

# put MODE DIR FILE...: installs the files into DEST/DIR
put() {
    local mode=$1 dir=$2 f
    shift 2
    mkdirs "$dir"
    for f in "$@"; do
        install -m "$mode" "$f" "$dest/$dir/"
        echo "f $dir/$(basename "$f")" >> "$new"
    done
}

install_all() {
    local vtlab=${1:?VTLAB}
    mkdir -p "$dest"
    new=$(mktemp)
    trap 'rm -f "$new"' EXIT
    [ -f "$manifest" ] && cat "$manifest" > "$new"   # a reinstall keeps what the first install made
    [ "$(basename "$vtlab")" = vtlab ] || { echo "install: $vtlab: expected a file named vtlab" >&2; exit 2; }
    put 0755 bin "$vtlab"
    put 0644 include model/vtprobe.h
    put 0644 share/vtlab/configs model/configs/*.json
    put 0644 share/vtlab/experiments experiments/*.json
    put 0644 share/vtlab/specs specs/README.md specs/engine-protocol.schema.json
    put 0644 share/vtlab/specs/claims specs/claims/*.json
    put 0644 share/vtlab/specs/defects specs/defects/*.json
    put 0644 share/doc/vtlab README.md docs/*.md
    mkdirs share/man/man1
    bash scripts/usage2man.sh "$vtlab" > "$dest/share/man/man1/vtlab.1"
    echo "f share/man/man1/vtlab.1" >> "$new"
    echo "f share/vtlab/install-manifest" >> "$new"
    sort -u "$new" | sort -k1,1r -k2 > "$manifest"
    echo "installed $(grep -c '^f ' "$manifest") file(s) into $dest (manifest: $manifest)"
}

case $action in
    install) install_all "${3:-}" ;;
    uninstall) uninstall ;;
    *) echo "install.sh: unknown action $action" >&2; exit 2 ;;
esac
