/*
 * metrics.c — Wilson intervals, McNemar's exact test, KL, top-k, quantiles,
 * relative L2, verdicts, f16 rounding and the dataset PRNG.
 *
 * These are the numbers a verdict rests on, so each is written for being
 * checked by hand rather than for speed: the forward pass dominates a run by
 * two orders of magnitude, and the statistics are O(vocab) per position.
 * Floating-point sums run in double so that a KL of 1e-9 between two nearly
 * identical f32 rows is not lost to cancellation.
 */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void lab_wilson(int64_t k, int64_t n, double z, double *lo, double *hi) {
    if (n <= 0) { *lo = 0.0; *hi = 1.0; return; }
    if (k < 0) k = 0;
    if (k > n) k = n;
    double nn = (double)n, p = (double)k / nn, z2 = z * z;
    double denom = 1.0 + z2 / nn;
    double centre = (p + z2 / (2.0 * nn)) / denom;
    double half = z * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / denom;
    double l = centre - half, h = centre + half;
    /* At k = 0 (k = n) the exact bound is 0 (1); rounding must not move it. */
    if (k == 0) l = 0.0;
    if (k == n) h = 1.0;
    *lo = l < 0.0 ? 0.0 : l;
    *hi = h > 1.0 ? 1.0 : h;
}

double lab_mcnemar_exact(int64_t b, int64_t c) {
    if (b < 0 || c < 0) return NAN;
    int64_t n = b + c;
    if (n == 0) return 1.0;
    int64_t m = b < c ? b : c;
    /* P[X <= m] for X ~ Bin(n, 1/2), summed as exp(log C(n,i) - n log 2),
     * largest term last-added via log-sum-exp to keep full precision. */
    double ln2n = (double)n * log(2.0);
    double lgn1 = lgamma((double)n + 1.0);
    double maxl = -INFINITY;
    for (int64_t i = 0; i <= m; i++) {
        double l = lgn1 - lgamma((double)i + 1.0) - lgamma((double)(n - i) + 1.0) - ln2n;
        if (l > maxl) maxl = l;
    }
    double s = 0.0;
    for (int64_t i = 0; i <= m; i++) {
        double l = lgn1 - lgamma((double)i + 1.0) - lgamma((double)(n - i) + 1.0) - ln2n;
        s += exp(l - maxl);
    }
    double p = 2.0 * exp(maxl) * s;
    return p > 1.0 ? 1.0 : p;
}

double lab_log_softmax(const float *logits, int64_t n, double *out) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if ((double)logits[i] > mx) mx = logits[i];
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)logits[i] - mx);
    double lse = mx + log(s);
    for (int64_t i = 0; i < n; i++) out[i] = (double)logits[i] - lse;
    return lse;
}

double lab_kl_logp(const double *logp, const double *logq, int64_t n) {
    double kl = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double p = exp(logp[i]);
        if (p == 0.0) continue;
        kl += p * (logp[i] - logq[i]);
    }
    return kl < 0.0 ? 0.0 : kl;
}

double lab_kl_logits(const float *p_logits, const float *q_logits, int64_t n, double *scratch) {
    double *buf = scratch;
    if (!buf) {
        buf = malloc((size_t)n * 2 * sizeof *buf);
        if (!buf) return NAN;
    }
    lab_log_softmax(p_logits, n, buf);
    lab_log_softmax(q_logits, n, buf + n);
    double kl = lab_kl_logp(buf, buf + n, n);
    if (!scratch) free(buf);
    return kl;
}

double lab_max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return NAN;
        if (d > m) m = d;
    }
    return m;
}

int64_t lab_argmax(const float *x, int64_t n) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        if (best < 0 || x[i] > x[best]) best = i;
    }
    return best < 0 ? 0 : best;
}

/* "a ranks before b": larger value first, then lower id. NaN ranks last. */
static int ranks_before(float va, int32_t ia, float vb, int32_t ib) {
    if (isnan(va)) return 0;
    if (isnan(vb)) return 1;
    if (va != vb) return va > vb;
    return ia < ib;
}

int64_t lab_topk(const float *x, int64_t n, int64_t k, int32_t *ids, float *vals) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    int64_t have = 0;
    /* Insertion into a sorted list of k: O(n k) with k ~ 20, cheaper than a
     * heap at this size and obviously correct. */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (have == k && !ranks_before(v, (int32_t)i, vals[k - 1], ids[k - 1])) continue;
        int64_t j = have < k ? have++ : k - 1;
        while (j > 0 && ranks_before(v, (int32_t)i, vals[j - 1], ids[j - 1])) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = (int32_t)i;
    }
    return k;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double lab_quantile(double *x, int64_t n, double q) {
    if (n <= 0) return NAN;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    if (q <= 0.0) return x[0];
    if (q >= 1.0) return x[n - 1];
    double pos = q * (double)(n - 1);
    int64_t i = (int64_t)floor(pos);
    double f = pos - (double)i;
    if (i + 1 >= n) return x[n - 1];
    return x[i] + f * (x[i + 1] - x[i]);
}

double lab_rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

lab_verdict lab_decide(double lo, double hi, double threshold, int direction_ge) {
    if (direction_ge) {
        if (lo >= threshold) return LAB_SUPPORTED;
        if (hi < threshold) return LAB_REFUTED;
    } else {
        if (hi <= threshold) return LAB_SUPPORTED;
        if (lo > threshold) return LAB_REFUTED;
    }
    return LAB_INCONCLUSIVE;
}

const char *lab_verdict_name(lab_verdict v) {
    switch (v) {
    case LAB_SUPPORTED: return "SUPPORTED";
    case LAB_REFUTED: return "REFUTED";
    default: return "INCONCLUSIVE";
    }
}

uint64_t lab_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
