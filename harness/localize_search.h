/*
 * localize_search.h — delta debugging over layer sets for `vtlab localize`
 * (docs/localize.md): the search alone, a pure function of its test's
 * answers, so that it can be replayed from stored steps and checked on
 * planted answers (tests/unit/test_localize_search.c).
 *
 * A set is a mask over n units (layers, or sites) in unit order. The test
 * says what the arm does with its levers on that set only: it passes the
 * experiment's decision rule, fails it, or the evidence cannot tell
 * (undecided, also once the dataset has grown as far as it may).
 */
#ifndef LAB_LOCALIZE_SEARCH_H
#define LAB_LOCALIZE_SEARCH_H

#include <stddef.h>
#include <stdint.h>

enum { LAB_LOC_PASS = 0, LAB_LOC_FAIL = 1, LAB_LOC_UNDECIDED = 2 };

/* The test of set[n] into *outcome (LAB_LOC_*); LAB_OK, or a status that
 * ends the search (out of runs, interrupted, a run that cannot be made). */
typedef int (*lab_loc_test_fn)(void *ctx, const uint8_t *set, int64_t n, int *outcome);

typedef struct lab_loc_result {
    int64_t tests;            /* calls of the test (a repeated set counts again: the caller's cache runs it once) */
    int     undecided;        /* 1: a removal of one unit from the result was undecided: the result fails, but a
                                 smaller set might too (it is not shown 1-minimal) */
} lab_loc_result;

/* ddmin (Zeller and Hildebrandt, 2002) from c[n] (a set the caller knows
 * to be interesting) to a subset out[n] that is interesting and from which
 * removing any one unit is not. interesting: the test says FAIL; with
 * complement, the search is over the units to switch off: a set r is
 * interesting when the test of (universe minus r) says PASS (universe: the
 * units of c). An undecided answer is never interesting: the search goes on
 * around it, and r->undecided says when that leaves the result unproved. A
 * single culprit among n units takes at most 2 ceil(log2 n) tests. */
int lab_loc_ddmin(lab_loc_test_fn fn, void *ctx, int64_t n, const uint8_t *c, int complement, uint8_t *out,
                  lab_loc_result *r);

/* Units in set[n]. */
int64_t lab_loc_count(const uint8_t *set, int64_t n);

#endif
