#!/usr/bin/env bash
# test_soak_short.sh — the short kill campaign in `make test`: 6 SIGKILLs at
# seeded points (the first two concurrent sweeps on a fresh database, then
# sweep, report, nightly and reopen in a seeded order), each followed by the
# integrity, completeness, output, ledger and orphan checks, then a resume
# compared with an uninterrupted baseline. About 15 s on 2 idle cores.
# The long version is `make soak` (SOAK_KILLS=60 by default); see
# tests/soak/kill_campaign.sh for what each check means.
#
# Usage (from the repository root): bash tests/cli/test_soak_short.sh ./vtlab
set -u
VTLAB=${1:-./vtlab}
exec bash "$(dirname "$0")/../soak/kill_campaign.sh" "$VTLAB" --kills 6 --seed 7
