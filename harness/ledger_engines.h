/*
 * ledger_engines.h — `vtlab specs check` against engines: claims and defects
 * whose knobs and faults are an engine's own (see ledger_engines.c).
 */
#ifndef LAB_LEDGER_ENGINES_H
#define LAB_LEDGER_ENGINES_H

#include <stdio.h>

#include "ledger.h"

/* Starts the engine of each claim whose experiment runs its arm on a command
 * engine and checks the claim's knobs and the replay faults of its
 * codebase's defects against it; one line per finding to out. *problems:
 * the findings that make the ledger wrong. LAB_OK when the checks ran. */
int lab_ledger_check_engines(const lab_ledger *l, FILE *out, int *problems, char *err, size_t errlen);

#endif
