/*
 * confound_key.c — a confound's key from its flag (confound_key.h).
 */
#include "confound_key.h"

#include <stdio.h>
#include <string.h>

/* Length of a "runN" or "refN" prefix of s (N: one or more digits), 0 when none. */
static size_t run_ref(const char *s) {
    if (strncmp(s, "run", 3) && strncmp(s, "ref", 3)) return 0;
    size_t n = strspn(s + 3, "0123456789");
    return n ? 3 + n : 0;
}

/* The flag key without the ids of runs: "run12:" prefixes (a claim's copy
 * of its run's flag) are dropped, and a key that is only a run id is "". */
static const char *cause(const char *key) {
    size_t n;
    while ((n = run_ref(key)) && key[n] == ':') key += n + 1;
    return run_ref(key) == strlen(key) && *key ? "" : key;
}

char *lab_confound_key(int claim, const char *subject, const char *experiment, const char *arm, const char *rule,
                       const char *key, char *out, size_t outlen) {
    const char *c = cause(key ? key : "");
    if (claim) snprintf(out, outlen, "%s/%s%s%s", subject, rule, *c ? "/" : "", c);
    else if (experiment && *experiment)
        snprintf(out, outlen, "%s/%s/%s%s%s", experiment, arm ? arm : "", rule, *c ? "/" : "", c);
    else snprintf(out, outlen, "run %s/%s%s%s", subject, rule, *c ? "/" : "", c);
    return out;
}
