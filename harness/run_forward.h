/*
 * run_forward.h — one forward pass of an experiment's dataset through an
 * engine instance, and what it accumulates.
 *
 * One pass serves three purposes, chosen by flags, which may be combined:
 *   LAB_PASS_RECORD    a run's own results: top-k per position, next-token
 *                      NLL, the full-logits hash, optional f16 full logits;
 *   LAB_PASS_FILL_REF  the reference cache: the reference's scored logit
 *                      rows and the residual captures of the first
 *                      `divergence.sequences` sequences;
 *   LAB_PASS_COMPARE   comparison with that cache: top-1 agreement, KL,
 *                      max |dlogit|, delta-p, per-layer relative L2.
 * Keeping it one pass means a reference recomputed by a later invocation
 * goes through exactly the code that produced it, so its logits hash must
 * match the stored one.
 *
 * Determinism: per-position statistics are computed in parallel (OpenMP)
 * into one slot per position and summed serially in position order, so
 * every stored number is independent of the thread count and schedule.
 */
#ifndef LAB_RUN_FORWARD_H
#define LAB_RUN_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "experiment.h"
#include "store.h"

/* The reference arm's data kept for comparisons. */
typedef struct lab_ref_cache {
    int      ready;
    int64_t  run_id;
    int      recomputed;     /* 1: filled by recomputation, not by this run */
    int      hash_match;     /* -1 not recomputed; else recomputed hash == stored hash */
    char     hash[65];       /* logits hash of the fill pass */
    int64_t  n_scored, vocab;
    float   *logits;         /* f32 [n_scored, vocab] */
    int32_t *top1;           /* int32 [n_scored] */
    int64_t  n_div_seq, n_layers, hidden;
    float   *resid;          /* f32: per captured sequence q, [n_layers, 2, T_q, hidden] at resid_off[q] */
    size_t  *resid_off;      /* [n_div_seq] element offsets into resid */
    int64_t *resid_T;        /* [n_div_seq] */
} lab_ref_cache;

void lab_ref_cache_free(lab_ref_cache *r);

enum { LAB_PASS_RECORD = 1, LAB_PASS_FILL_REF = 2, LAB_PASS_COMPARE = 4 };

/* Accumulators of one pass; zero-initialise, free with lab_pass_acc_free. */
typedef struct lab_pass_acc {
    vt_sha256_ctx hash;
    char      hash_hex[65];   /* the run's logits hash: sha256 of its sequences' logits hashes, each as 64
                               * hex digits and '\n', in dataset order (composes over shards; docs/slurm.md) */
    lab_seq_stat *seq;        /* [n_seq] what each sequence contributed (run_sequences) */
    double   *seq_div;        /* [n_div, n_layers * 2, 2] each captured sequence's (num, den) */
    int64_t   n_seq, n_layers;
    int64_t   top_k;
    int32_t  *topk_ids;       /* int32 [n_tokens, top_k] (RECORD) */
    float    *topk_lp;        /* f32 [n_tokens, top_k] log-probs */
    uint16_t *full;           /* f16 bits [n_tokens, vocab], or NULL */
    double    nll_sum;
    int64_t   nll_n;
    double    f16_kl_sum, f16_kl_max, f16_dlogit_max;
    int64_t   f16_n;
    int64_t   n_scored, agree;
    double   *kl;             /* f64 [n_scored] (COMPARE) */
    double   *dp;             /* f64 [n_scored]: p(ref's top-1) under this run minus under the reference */
    double   *dnll;           /* f64 [n_scored]: -log p(next token), this run minus the reference;
                               * NaN at a sequence's last position (no next token) */
    double    maxdiff, dp2_sum;
    double   *div_num, *div_den;   /* f64 [n_layers * 2] */
    double    forward_s;
    vt_probe *probes;         /* [n_probes] */
    int64_t   n_probes;
    int64_t   probes_lost;    /* observations the engine could not record */
} lab_pass_acc;

void lab_pass_acc_free(lab_pass_acc *a);

/* A progress line on stderr (on = 0: silent). */
typedef struct lab_progress {
    int         on;           /* LAB_PROGRESS_* */
    const char *label;
    double      t0;
    int64_t     tokens_total, tokens_done;
    double      last_line;    /* LAB_PROGRESS_LINES: when the last line was printed */
    double      interval;     /* LAB_PROGRESS_LINES: seconds between lines (lab_progress_start) */
} lab_progress;

/* Off; a line redrawn in place (a terminal); or, for a log (CI), a plain
 * line every LAB_PROGRESS_LINE_S seconds of a pass that lasts that long
 * (VTLAB_PROGRESS_INTERVAL=SECONDS sets another interval). */
enum { LAB_PROGRESS_OFF = 0, LAB_PROGRESS_TTY = 1, LAB_PROGRESS_LINES = 2 };
#define LAB_PROGRESS_LINE_S 10.0


/* Restarts p under label (p may be NULL); clears the line at the end. */
void lab_progress_start(lab_progress *p, const char *label);
void lab_progress_end(lab_progress *p);

/* Runs e's dataset through eng->inst when it is open (left open unless the
 * pass fails: then it is closed and NULLed), else through a new instance
 * for req. flags choose
 * what is accumulated into acc; ref is filled (FILL_REF; freed on failure)
 * or read (COMPARE). pg may be NULL. Returns LAB_OK, or a status with err
 * filled: *killed = 1 when a signal (lab_interrupted) stopped it. */
int lab_forward_pass(const lab_experiment *e, lab_engine *eng, const lab_engine_req *req, int flags,
                     lab_ref_cache *ref, lab_pass_acc *acc, lab_progress *pg, int *killed, char *err, size_t errlen);

#endif
