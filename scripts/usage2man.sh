#!/usr/bin/env bash
# usage2man.sh VTLAB > vtlab.1 — the man page, made from the usage text
# `vtlab --help` prints and each command's `vtlab CMD --help` (both made from
# the command table, harness/help.c), so that the page and --help never say
# different things. `make install` runs it on the vtlab it installs.
#
# The usage text's shape: "usage: vtlab COMMAND [options]"; section lines
# ("lab commands (...):") start in column 1; a command's entry starts with
# two blanks and its name, its synopsis, then (after two or more blanks) what
# it does; more-indented lines continue it: short indents continue the
# synopsis, the description column (39) continues the description.
set -euo pipefail
VTLAB=${1:?usage: usage2man.sh VTLAB}
version=$("$VTLAB" version | cut -d'|' -f1)
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%d)
"$VTLAB" --help | awk -v version="$version" -v date="$date" '
function esc(s) {                      # troff: backslashes, then dashes; a leading . or '"'"' escaped
    gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s)
    if (s ~ /^[.'"'"']/) s = "\\&" s
    return s
}
function flush() {
    if (cmd == "") return
    print ".TP"
    print ".B vtlab " esc(cmd)
    if (syn != "") print esc(syn)
    if (desc != "") { print ".br"; print esc(desc) }
    cmd = ""; syn = ""; desc = ""
}
BEGIN {
    print ".TH VTLAB 1 \"" date "\" \"vtlab " esc(version) "\" \"User Commands\""
    print ".SH NAME"
    print "vtlab \\- a regression lab for Kimi\\-Linear inference numerics"
    print ".SH SYNOPSIS"
    print ".B vtlab"
    print ".I COMMAND"
    print "[options]"
    print ".br"
    print ".B vtlab"
    print ".I COMMAND"
    print "\\-\\-help"
    print ".SH DESCRIPTION"
    print "vtlab runs a Kimi\\-Linear model (its own, or any engine speaking its engine protocol) under"
    print "arms of knobs, records logits and runtime dtype assertions in results.db, and judges claims"
    print "against known defects. Every option takes \\-\\-opt value or \\-\\-opt=value;"
    print ".B vtlab"
    print ".I COMMAND"
    print "\\-\\-help (or vtlab help COMMAND) prints that command'"'"'s section of COMMAND DETAILS."
    print ".SH COMMANDS"
}
/^usage:/ { next }
/^[^ ]/ {                               # a section
    flush()
    title = $0; sub(/:$/, "", title)
    print ".SS " esc(title)
    next
}
/^  [^ ]/ {                             # a command entry: NAME SYNOPSIS [description at column 40]
    flush()
    line = substr($0, 3)
    split(line, w, " "); cmd = w[1]
    at = 3 + length(cmd)
    if (length($0) > 40 && substr($0, 39, 1) == " " && substr($0, 40, 1) ~ /[a-z(]/) {
        syn = substr($0, at, 39 - at); desc = substr($0, 40)
    } else syn = substr($0, at)
    sub(/^ +/, "", syn); sub(/ +$/, "", syn)
    next
}
/^   / {                                # a continuation
    text = $0; indent = match(text, /[^ ]/) - 1; sub(/^ +/, "", text)
    if (indent >= 30) desc = (desc == "" ? text : desc " " text)
    else syn = syn " " text
    next
}
END { flush() }'
# Each command's help (`vtlab CMD --help`: its options with their defaults,
# exit status and examples), as the command prints it.
echo ".SH COMMAND DETAILS"
"$VTLAB" --help | sed -n 's/^  \([a-z][a-z-]*\).*/\1/p' | uniq | while read -r c; do
    echo ".SS vtlab ${c//-/\\-}"
    echo ".nf"
    "$VTLAB" "$c" --help | tail -n +2 | sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^[.']/\\\\\\&&/"
    echo ".fi"
done
cat <<'EOF'
.SH ENVIRONMENT
.TP
.B VTLAB_CACHE
where synthetic models are built once and kept (\-\-cache DIR sets it); default
$XDG_CACHE_HOME/vtlab, else ~/.cache/vtlab. Never the current directory.
.TP
.B VTLAB_DATA_DIR
the shipped data (configs/, experiments/, specs/); default PREFIX/share/vtlab beside the
installed binary, or the source tree a vtlab built in it runs from.
.TP
.B VT_*
knobs of the model (vtlab knobs lists them); an unknown one is an error.
.SH FILES
.TP
.I results.db
every run, in the current directory unless \-\-db PATH.
.TP
.I experiments/, specs/
a project's experiments and ledger (vtlab init makes them). Paths inside a file are relative to it.
.SH EXIT STATUS
0 success; 1 a check failed; 2 bad input or usage, with a message naming the file and the field.
What each command's 0, 1 and 2 mean is in its section of COMMAND DETAILS.
.SH SEE ALSO
The documentation in PREFIX/share/doc/vtlab (README.md, cli.md, experiments.md, schema.md, specs.md, nightly.md).
EOF
