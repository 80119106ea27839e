/*
 * localize_search.c — ddmin over layer sets (see localize_search.h).
 *
 * The chunks of a set are contiguous runs of its units in unit order: a
 * fault in one layer, or in a few neighbouring ones, is then found by
 * halving, the case the bound of docs/localize.md is about.
 */
#include "localize_search.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int64_t lab_loc_count(const uint8_t *set, int64_t n) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += set[i] != 0;
    return k;
}

typedef struct dd {
    lab_loc_test_fn fn;
    void           *ctx;
    int64_t         n;
    int             complement;
    const uint8_t  *universe;   /* complement: the units a removal set is taken from */
    uint8_t        *probe;      /* [n] the set handed to the test */
    lab_loc_result *r;
} dd;

/* Whether set s is interesting; *und: the test said undecided. */
static int interesting(dd *d, const uint8_t *s, int *is, int *und) {
    int outcome = LAB_LOC_UNDECIDED;
    for (int64_t i = 0; i < d->n; i++) d->probe[i] = d->complement ? (d->universe[i] && !s[i]) : s[i];
    d->r->tests++;
    int rc = d->fn(d->ctx, d->probe, d->n, &outcome);
    *und = outcome == LAB_LOC_UNDECIDED;
    *is = !rc && outcome == (d->complement ? LAB_LOC_PASS : LAB_LOC_FAIL);
    return rc;
}

/* Chunk i of g of c's units (m of them, listed in idx) into out. */
static void chunk(const int64_t *idx, int64_t m, int64_t g, int64_t i, int64_t n, uint8_t *out) {
    memset(out, 0, (size_t)n);
    for (int64_t j = i * m / g; j < (i + 1) * m / g; j++) out[idx[j]] = 1;
}

/* One round at granularity *g: 1 when c shrank (c, *g updated); 0 when no
 * chunk nor complement is interesting (*und_removal: a removal of one unit,
 * tested in this round, was undecided). */
static int round_of(dd *d, uint8_t *c, int64_t *g, int64_t *idx, uint8_t *t, int *und_removal, int *rc) {
    int64_t m = 0;
    for (int64_t i = 0; i < d->n; i++)
        if (c[i]) idx[m++] = i;
    const int removals_are_chunks = *g == 2;   /* with two chunks each one is the other's complement */
    *und_removal = 0;
    for (int64_t i = 0; i < *g && !*rc; i++) {
        int is = 0, und = 0;
        chunk(idx, m, *g, i, d->n, t);
        *rc = interesting(d, t, &is, &und);
        if (und && removals_are_chunks && *g >= m) *und_removal = 1;
        if (is) { memcpy(c, t, (size_t)d->n); *g = 2; return 1; }
    }
#ifndef VT_MUTATE_DDMIN_NO_COMPLEMENTS   /* make mutation: chunks only; test_localize_search must fail */
    const int complements = *g > 2;
#else
    const int complements = 0;
#endif
    for (int64_t i = 0; complements && i < *g && !*rc; i++) {
        int is = 0, und = 0;
        chunk(idx, m, *g, i, d->n, t);
        for (int64_t j = 0; j < d->n; j++) t[j] = c[j] && !t[j];
        *rc = interesting(d, t, &is, &und);
        if (und && *g >= m) *und_removal = 1;
        if (is) { memcpy(c, t, (size_t)d->n); *g = *g - 1 > 2 ? *g - 1 : 2; return 1; }
    }
    return 0;
}

int lab_loc_ddmin(lab_loc_test_fn fn, void *ctx, int64_t n, const uint8_t *c0, int complement, uint8_t *out,
                  lab_loc_result *r) {
    memset(r, 0, sizeof *r);
    uint8_t *c = malloc((size_t)n + 1), *t = malloc((size_t)n + 1), *probe = malloc((size_t)n + 1);
    int64_t *idx = malloc(((size_t)n + 1) * sizeof *idx);
    int rc = c && t && probe && idx ? LAB_OK : LAB_ENOMEM;
    dd d = {fn, ctx, n, complement, c0, probe, r};
    if (!rc) memcpy(c, c0, (size_t)n);
    for (int64_t g = 2; !rc && lab_loc_count(c, n) >= 2;) {
        int und = 0, shrank = round_of(&d, c, &g, idx, t, &und, &rc);
        if (rc || shrank) continue;
        const int64_t m = lab_loc_count(c, n);
        if (g >= m) {   /* every unit alone was removed: c is 1-minimal, unless one removal was undecided */
            r->undecided = und;
            break;
        }
        g = 2 * g < m ? 2 * g : m;
    }
    if (!rc) memcpy(out, c, (size_t)n);
    free(c);
    free(t);
    free(probe);
    free(idx);
    return rc;
}
