#!/usr/bin/env bash
# The planted-confound suite (tests/audit/run.sh) inside `make test`.
set -u
bash tests/audit/run.sh "${1:-./vtlab}"
