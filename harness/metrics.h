/*
 * metrics.h — the statistics vtlab reports, as pure functions.
 *
 * Everything here is a function of its arguments: no model, no database, no
 * globals, so each one is tested against hand-computed values
 * (tests/unit/test_metrics.c). The runner feeds them logits rows ([vocab] f32)
 * and counts; the store keeps what they return.
 *
 * Conventions: natural logarithms everywhere (KL in nats, perplexity = e^NLL);
 * argmax and top-k break ties toward the lower token id, so that two runs with
 * identical logits always agree; sizes are int64_t.
 */
#ifndef LAB_METRICS_H
#define LAB_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* z for a two-sided 95% interval. */
#define LAB_Z95 1.959963984540054

/* Wilson score interval for k successes out of n at normal quantile z.
 * n == 0 gives the uninformative [0, 1]. k is clamped to [0, n]. */
void lab_wilson(int64_t k, int64_t n, double z, double *lo, double *hi);

/* McNemar's exact test (two-sided): b and c are the discordant counts (A right
 * and B wrong; A wrong and B right). Under H0 b ~ Binomial(b + c, 1/2);
 * p = min(1, 2 * P[X <= min(b, c)]). b + c == 0 gives p = 1. Computed in log
 * space, so it is exact to double precision for any count. */
double lab_mcnemar_exact(int64_t b, int64_t c);

/* out[v] = log softmax(logits)[v] over n entries, computed stably (max
 * subtracted). Returns the log partition function (log sum exp). */
double lab_log_softmax(const float *logits, int64_t n, double *out);

/* KL(P || Q) in nats, where P and Q are given as log-probabilities over n
 * entries (from lab_log_softmax). Terms with P = 0 contribute 0. Clamped at 0
 * from below: rounding can make a true 0 come out as -1e-17. */
double lab_kl_logp(const double *logp, const double *logq, int64_t n);

/* KL(softmax(p_logits) || softmax(q_logits)), with scratch of 2n doubles
 * supplied by the caller (NULL: allocated here; returns NaN if that fails). */
double lab_kl_logits(const float *p_logits, const float *q_logits, int64_t n, double *scratch);

/* max_v |a[v] - b[v]| over n entries. NaN in either input gives NaN. */
double lab_max_abs_diff(const float *a, const float *b, int64_t n);

/* Index of the largest entry; ties go to the lower index; NaNs are skipped
 * (an all-NaN row gives 0). */
int64_t lab_argmax(const float *x, int64_t n);

/* The k largest entries of x in descending order (ties: lower id first):
 * ids[0..k) and vals[0..k) = x[ids]. k is clamped to n; returns the k used. */
int64_t lab_topk(const float *x, int64_t n, int64_t k, int32_t *ids, float *vals);

/* Linear-interpolated quantile q in [0, 1] of x[0..n) (numpy's default
 * method); sorts x in place. n == 0 gives NaN. */
double lab_quantile(double *x, int64_t n, double q);

/* Relative L2 distance ||a - b|| / ||b|| over n floats; 0 when both are zero;
 * +inf when b is zero and a is not. Accumulates in double. */
double lab_rel_l2(const float *a, const float *b, int64_t n);

/* Verdict of a decision rule against an interval [lo, hi]:
 * direction ">=" (good when metric >= threshold) or "<=".
 * SUPPORTED when the whole interval is on the good side (lo >= t for ">="),
 * REFUTED when the whole interval is on the bad side (hi < t for ">="),
 * INCONCLUSIVE when it straddles. */
typedef enum lab_verdict { LAB_INCONCLUSIVE = 0, LAB_SUPPORTED = 1, LAB_REFUTED = 2 } lab_verdict;
lab_verdict lab_decide(double lo, double hi, double threshold, int direction_ge);
const char *lab_verdict_name(lab_verdict v);

/* splitmix64: the documented generator of `"generate"` datasets.
 * state += 0x9E3779B97F4A7C15; z = state; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
 * z = (z ^ z>>27) * 0x94D049BB133111EB; return z ^ z>>31. */
uint64_t lab_splitmix64(uint64_t *state);

#endif
