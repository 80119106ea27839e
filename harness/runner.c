/*
 * runner.c — executing arms and recording runs (see runner.h).
 *
 * One forward loop serves three purposes, chosen by flags: recording a run
 * (top-k per position, next-token NLL, full-logits hash, optional f16 full
 * logits), filling the reference cache (the reference's scored logit rows and
 * residual captures), and comparing against that cache (top-1 agreement, KL,
 * max |dlogit|, delta-p, per-layer relative L2). Keeping it one loop means
 * the reference recomputed for a later invocation goes through exactly the
 * code that produced it the first time, so its logits hash must match.
 *
 * Memory: the reference cache holds [n_scored, vocab] f32 plus the captured
 * residuals of `divergence.sequences` sequences; for the tiny model and the
 * shipped datasets that is under 20 MB. A run's own top-k is
 * [n_tokens, top_k] ids and log-probs, written at the end in one transaction.
 *
 * Exit-status policy (lab.c maps it): bad input -> 2 before the database is
 * opened; a FAILED/KILLED run, or an arm whose assertion outcome differs from
 * its `expect_assertions`, counts as a check failure -> 1.
 */
#include "runner.h"

#include <dirent.h>
#include <sys/stat.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "store.h"
#include "util.h"

extern char **environ;

volatile sig_atomic_t lab_interrupted = 0;

static void on_signal(int sig) {
    (void)sig;
    lab_interrupted = 1;
}

void lab_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* How long a run waits for runs held by another live process (seconds). */
#define LAB_WAIT_MAX_S 1800

/* ------------------------------------------------------------ model files */

int lab_model_dir(const lab_experiment *e, char **dir, char *err, size_t errlen) {
    *dir = NULL;
    if (!e->model_synth) {
        if (!lab_path_exists(e->model_dir))
            return lab_errf(err, errlen, LAB_EINPUT, "%s: model: checkpoint dir %s does not exist", e->path,
                            e->model_dir);
        *dir = lab_strdup(e->model_dir);
        return *dir ? LAB_OK : LAB_ENOMEM;
    }
    char *cfg = NULL;
    size_t n = 0;
    int rc = lab_read_file(e->synth_config, &cfg, &n, err, errlen);
    if (rc) return lab_err_prefix(err, errlen, LAB_EINPUT, "%s: model.synth", e->path);
    /* Cache key: the config's bytes, the seed, the dtype and the synth
     * algorithm's version — everything vt_synth's output is a function of.
     * Without the version a cache made by an older synth would be reused,
     * and an old checkout would measure another model than a fresh clone. */
    vt_sha256_ctx c;
    char tail[96], hex[65];
    vt_sha256_init(&c);
    vt_sha256_update(&c, cfg, n);
    snprintf(tail, sizeof tail, "\nseed=%llu\ndtype=%s\nsynth=%d\n", (unsigned long long)e->synth_seed,
             e->synth_dtype, vt_synth_version());
    vt_sha256_update(&c, tail, strlen(tail));
    vt_sha256_final_hex(&c, hex);
    free(cfg);
    char path[512], probe[600];
    snprintf(path, sizeof path, "build/models/%.16s", hex);
    snprintf(probe, sizeof probe, "%s/model.safetensors", path);
    char probe2[600];
    snprintf(probe2, sizeof probe2, "%s/config.json", path);
    if (!lab_path_exists(probe) || !lab_path_exists(probe2)) {
        if ((rc = lab_mkdirs("build/models", err, errlen))) return rc;
        char verr[1024] = "";
        rc = vt_synth(e->synth_config, e->synth_seed, e->synth_dtype, path, verr, sizeof verr);
        if (rc)
            return lab_errf(err, errlen, rc == VT_STATUS_INPUT ? LAB_EINPUT : rc, "%s: model.synth: %s", e->path, verr);
    }
    *dir = lab_strdup(path);
    return *dir ? LAB_OK : LAB_ENOMEM;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int hash_file_into(vt_sha256_ctx *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return lab_errf(err, errlen, LAB_EIO, "%s: cannot open for hashing", path);
    static char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) vt_sha256_update(c, buf, n);
    int bad = ferror(f);
    fclose(f);
    return bad ? lab_errf(err, errlen, LAB_EIO, "%s: read failed", path) : LAB_OK;
}

static int model_sha256_uncached(const char *dir, char out[65], char *err, size_t errlen) {
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = hash_file_into(&c, path, err, errlen);
    if (rc) return rc;
    DIR *d = opendir(dir);
    if (!d) return lab_errf(err, errlen, LAB_EIO, "%s: cannot list", dir);
    char *names[1024];
    int64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024) {
        size_t l = strlen(de->d_name);
        if (l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) names[n++] = lab_strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int64_t i = 0; i < n; i++) {
        if (!rc && names[i]) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            rc = hash_file_into(&c, path, err, errlen);
        }
        free(names[i]);
    }
    if (rc) return rc;
    if (n == 0) return lab_errf(err, errlen, LAB_EINPUT, "%s: no *.safetensors file", dir);
    vt_sha256_final_hex(&c, out);
    return LAB_OK;
}

/* The model hash is ~0.2 s per 32 MB, paid by every experiment of a sweep.
 * It is cached next to synthetic models only (build/models/, which vtlab
 * owns; a user's checkpoint dir is never written): the sidecar
 * model.sha256 holds the size and mtime of every hashed file and is
 * trusted only while they are unchanged. */
static void stamp_files(const char *dir, lab_buf *b) {
    DIR *d = opendir(dir);
    if (!d) return;
    char *names[1024];
    int64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 1024) {
        size_t l = strlen(de->d_name);
        if ((l > 12 && !strcmp(de->d_name + l - 12, ".safetensors")) || !strcmp(de->d_name, "config.json"))
            names[n++] = lab_strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int64_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i] ? names[i] : "");
        if (names[i] && stat(path, &st) == 0)
            lab_buf_printf(b, "%s %lld %lld.%09ld\n", names[i], (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                           st.st_mtim.tv_nsec);
        free(names[i]);
    }
}

int lab_model_sha256(const char *dir, char out[65], char *err, size_t errlen) {
    int cacheable = !strncmp(dir, "build/models/", 13);
    lab_buf stamp = {0};
    char side[4096];
    snprintf(side, sizeof side, "%s/model.sha256", dir);
    if (cacheable) {
        stamp_files(dir, &stamp);
        char *text = NULL;
        if (!stamp.oom && lab_read_file(side, &text, NULL, NULL, 0) == LAB_OK) {
            /* sidecar: the stamp lines, then the hash on the last line */
            size_t sl = stamp.len;
            if (strlen(text) == sl + 65 && !memcmp(text, stamp.data, sl) && text[sl + 64] == '\n') {
                memcpy(out, text + sl, 64);
                out[64] = 0;
                free(text);
                lab_buf_free(&stamp);
                return LAB_OK;
            }
        }
        free(text);
    }
    int rc = model_sha256_uncached(dir, out, err, errlen);
    if (!rc && cacheable && !stamp.oom) {
        /* Written whole via rename, so a concurrent reader never sees half. */
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", side, (int)getpid());
        FILE *f = fopen(tmp, "w");
        if (f) {
            int bad = fprintf(f, "%s%s\n", stamp.data ? stamp.data : "", out) < 0;
            bad |= fclose(f) != 0;
            if (bad || rename(tmp, side) != 0) unlink(tmp);
        }
    }
    lab_buf_free(&stamp);
    return rc;
}

/* ------------------------------------------------------------ knobs */

int lab_resolve_knobs(const lab_experiment *e, int64_t i, char *const *envp, vt_knobset **out,
                      char *err, size_t errlen) {
    *out = NULL;
    const lab_arm *a = &e->arms[i];
    vt_knobset *ks = NULL;
    char verr[1024] = "";
    int rc = vt_knobset_new(&ks);
    if (rc) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    if (envp && (rc = vt_knobset_from_env(ks, envp, verr, sizeof verr))) {
        vt_knobset_free(ks);
        return lab_errf(err, errlen, rc == VT_STATUS_INPUT ? LAB_EINPUT : rc, "environment: %s", verr);
    }
    int probe_set = 0;
    for (int64_t k = 0; k < a->n_knobs; k++) {
        if ((rc = vt_knobset_set(ks, a->knob_names[k], a->knob_values[k], verr, sizeof verr))) {
            vt_knobset_free(ks);
            return lab_errf(err, errlen, rc == VT_STATUS_INPUT ? LAB_EINPUT : rc, "%s: arms[%lld].knobs.%s: %s",
                            e->path, (long long)i, a->knob_names[k], verr);
        }
        if (!strcmp(a->knob_names[k], "VT_PROBE")) probe_set = 1;
    }
    /* Expectations and invariants need probes: on unless the arm says otherwise. */
    if (!probe_set && (rc = vt_knobset_set(ks, "VT_PROBE", e->probe, verr, sizeof verr))) {
        vt_knobset_free(ks);
        return lab_errf(err, errlen, LAB_EINPUT, "%s: probe: %s", e->path, verr);
    }
    *out = ks;
    return LAB_OK;
}

/* ------------------------------------------------------------ the forward loop */

/* The reference arm's data kept for comparisons. */
typedef struct ref_cache {
    int      ready;
    int64_t  run_id;
    int      recomputed;     /* 1: filled by recomputation, not by this run */
    int      hash_match;     /* -1 not recomputed; else recomputed hash == stored hash */
    char     hash[65];       /* logits hash of the fill pass */
    int64_t  n_scored, vocab;
    float   *logits;         /* [n_scored, vocab] */
    int32_t *top1;           /* [n_scored] */
    int64_t  n_div_seq, n_layers, hidden;
    float   *resid;          /* per captured sequence q: [n_layers, 2, T_q, hidden] at resid_off[q] */
    size_t  *resid_off;      /* [n_div_seq] */
    int64_t *resid_T;        /* [n_div_seq] */
} ref_cache;

static void ref_cache_free(ref_cache *r) {
    free(r->logits);
    free(r->top1);
    free(r->resid);
    free(r->resid_off);
    free(r->resid_T);
    memset(r, 0, sizeof *r);
}

enum { PASS_RECORD = 1, PASS_FILL_REF = 2, PASS_COMPARE = 4 };

/* Accumulators of one pass. */
typedef struct pass_acc {
    vt_sha256_ctx hash;
    char     hash_hex[65];
    int64_t  top_k;
    int32_t *topk_ids;       /* [n_tokens, top_k] (PASS_RECORD) */
    float   *topk_lp;        /* [n_tokens, top_k] */
    uint16_t *full;          /* [n_tokens, vocab] f16 or NULL */
    double   nll_sum;
    int64_t  nll_n;
    double   f16_kl_sum, f16_kl_max, f16_dlogit_max;
    int64_t  f16_n;
    int64_t  n_scored, agree;
    double  *kl;             /* [n_scored] (PASS_COMPARE) */
    double   maxdiff, dp2_sum;
    double  *div_num, *div_den;   /* [n_layers * 2] */
    double   forward_s;
    vt_probe *probes;        /* [n_probes] copied at the end */
    int64_t  n_probes;
    int64_t  probes_lost;    /* observations the model could not record */
} pass_acc;

static void pass_acc_free(pass_acc *a) {
    free(a->topk_ids);
    free(a->topk_lp);
    free(a->full);
    free(a->kl);
    free(a->div_num);
    free(a->div_den);
    free(a->probes);
    memset(a, 0, sizeof *a);
}

static int64_t count_scored(const lab_experiment *e) {
    return e->score_last ? e->ds.n_seq : e->ds.offsets[e->ds.n_seq];
}

typedef struct progress {
    int         on;
    const char *label;
    double      t0;
    int64_t     tokens_total, tokens_done;
} progress;

static void progress_show(progress *p, int64_t q, int64_t nq) {
    if (!p->on) return;
    double dt = lab_mono() - p->t0;
    double tps = dt > 0 ? (double)p->tokens_done / dt : 0.0;
    double eta = tps > 0 ? (double)(p->tokens_total - p->tokens_done) / tps : 0.0;
    fprintf(stderr, "\r\033[K  %s  sequence %lld/%lld  %.0f tok/s  ETA %.0fs", p->label, (long long)q,
            (long long)nq, tps, eta);
    fflush(stderr);
}

static void progress_end(progress *p) {
    if (p->on) fprintf(stderr, "\r\033[K");
}

/* Runs the dataset through a new session under ks. flags choose what is
 * accumulated; ref is filled (PASS_FILL_REF) or read (PASS_COMPARE). */
static int forward_pass(const lab_experiment *e, vt_model *m, const vt_model_info *mi, const vt_knobset *ks,
                        int flags, ref_cache *ref, pass_acc *acc, progress *pg, int *killed,
                        char *err, size_t errlen) {
    const lab_dataset *ds = &e->ds;
    int64_t V = mi->vocab_size, H = mi->hidden_size, L = mi->n_layers;
    int64_t n_tok = ds->offsets[ds->n_seq], n_sc = count_scored(e);
    int want_div = (e->metrics & LAB_M_LAYERDIV) && (flags & (PASS_FILL_REF | PASS_COMPARE));
    int64_t n_div = want_div ? (e->div_sequences < ds->n_seq ? e->div_sequences : ds->n_seq) : 0;
    char verr[1024] = "";
    vt_session *s = NULL;
    float *logits = NULL;
    double *scratch = NULL;     /* [threads, 4, vocab]: log-probs, reference log-probs, KL scratch */
    int rc = LAB_OK;
    *killed = 0;

    vt_sha256_init(&acc->hash);
    acc->top_k = e->top_k < V ? e->top_k : V;
    logits = malloc((size_t)(ds->max_len * V) * sizeof *logits);
    scratch = malloc((size_t)omp_get_max_threads() * 4 * (size_t)V * sizeof *scratch);
    if (!logits || !scratch) goto oom;
    if (flags & PASS_RECORD) {
        acc->topk_ids = malloc((size_t)(n_tok * acc->top_k) * sizeof *acc->topk_ids);
        acc->topk_lp = malloc((size_t)(n_tok * acc->top_k) * sizeof *acc->topk_lp);
        if (!acc->topk_ids || !acc->topk_lp) goto oom;
        if (e->store_full_logits && !(acc->full = malloc((size_t)(n_tok * V) * sizeof *acc->full))) goto oom;
    }
    if (flags & PASS_COMPARE) {
        if (!(acc->kl = malloc((size_t)(n_sc > 0 ? n_sc : 1) * sizeof *acc->kl))) goto oom;
        if (n_div && (!(acc->div_num = calloc((size_t)(L * 2), sizeof(double))) ||
                      !(acc->div_den = calloc((size_t)(L * 2), sizeof(double))))) goto oom;
    }
    if (flags & PASS_FILL_REF) {
        ref_cache_free(ref);
        ref->n_scored = n_sc;
        ref->vocab = V;
        ref->n_layers = L;
        ref->hidden = H;
        ref->n_div_seq = n_div;
        ref->hash_match = -1;
        ref->logits = malloc((size_t)(n_sc * V) * sizeof *ref->logits);
        ref->top1 = malloc((size_t)n_sc * sizeof *ref->top1);
        if (!ref->logits || !ref->top1) goto oom;
        if (n_div) {
            ref->resid_off = calloc((size_t)n_div, sizeof *ref->resid_off);
            ref->resid_T = calloc((size_t)n_div, sizeof *ref->resid_T);
            size_t tot = 0;
            for (int64_t q = 0; q < n_div; q++) {
                ref->resid_off[q] = tot;
                tot += (size_t)(L * 2 * (ds->offsets[q + 1] - ds->offsets[q]) * H);
            }
            ref->resid = malloc(tot * sizeof *ref->resid);
            if (!ref->resid_off || !ref->resid_T || !ref->resid) goto oom;
        }
    }

    if ((rc = vt_session_new(&s, m, ks, verr, sizeof verr))) {
        rc = lab_errf(err, errlen, rc == VT_STATUS_INPUT ? LAB_EINPUT : (rc ? rc : LAB_EINTERNAL),
                      "session: %s", verr);
        goto done;
    }
    int64_t sc = 0;
    for (int64_t q = 0; q < ds->n_seq; q++) {
        if (lab_interrupted) { *killed = 1; rc = lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal"); goto done; }
        const int32_t *tok = ds->tokens + ds->offsets[q];
        int64_t T = ds->offsets[q + 1] - ds->offsets[q];
        vt_session_capture(s, q < n_div);
        if ((rc = vt_session_prefill(s, tok, T, logits, verr, sizeof verr))) {
            rc = lab_errf(err, errlen, LAB_EINTERNAL, "sequence %lld: %s", (long long)q, verr);
            goto done;
        }
        /* Per-position statistics, spread over the OpenMP threads while one
         * of them hashes the sequence's logits (a task): the hash is the
         * largest single cost outside the forward pass (16 MB per run of
         * the tiny model at ~175 MB/s). Scored position t of this sequence
         * is sc0 + t ("all") or sc0 ("last"). */
        int64_t sc0 = sc;
        int64_t n_sc_here = e->score_last ? 1 : T;
        double nll = 0, f16kl = 0, f16klmax = 0, f16dmax = 0, dp2 = 0, maxd = 0;
        int64_t nlln = 0, f16n = 0, agree = 0, nan_seen = 0;
        #pragma omp parallel reduction(+ : nll, f16kl, dp2, nlln, f16n, agree, nan_seen) \
            reduction(max : f16klmax, f16dmax, maxd)
        {
            #pragma omp single nowait
            {
                #pragma omp task
                vt_sha256_update(&acc->hash, logits, (size_t)(T * V) * sizeof *logits);
            }
            double *lp = scratch + (size_t)omp_get_thread_num() * 4 * (size_t)V, *lq = lp + V, *kls = lq + V;
            #pragma omp for schedule(dynamic, 4)
            for (int64_t t = 0; t < T; t++) {
                const float *row = logits + t * V;
                int scored = !e->score_last || t == T - 1;
                int64_t si = e->score_last ? sc0 : sc0 + t;
                int need_lp = (flags & PASS_RECORD) || ((flags & PASS_COMPARE) && scored);
                double lse = need_lp ? lab_log_softmax(row, V, lp) : 0.0;
                if (flags & PASS_RECORD) {
                    int64_t gi = ds->offsets[q] + t;
                    int32_t *ids = acc->topk_ids + gi * acc->top_k;
                    float *vals = acc->topk_lp + gi * acc->top_k;
                    lab_topk(row, V, acc->top_k, ids, vals);
                    for (int64_t j = 0; j < acc->top_k; j++) vals[j] = (float)((double)vals[j] - lse);
                    if (t + 1 < T) {
                        nll -= lp[tok[t + 1]];
                        nlln++;
                    }
                    if (acc->full) {
                        uint16_t *h = acc->full + gi * V;
                        float *back = (float *)lq; /* V floats fit in V doubles */
                        for (int64_t v = 0; v < V; v++) {
                            h[v] = vt_f16_bits_from_f32(row[v]);
                            back[v] = vt_f32_from_f16_bits(h[v]);
                        }
                        /* The noise floor of the f16 store: KL(f32 || f16-rounded). */
                        double d = lab_max_abs_diff(row, back, V);
                        if (d > f16dmax) f16dmax = d;
                        double kl = lab_kl_logits(row, back, V, kls);
                        f16kl += kl;
                        if (kl > f16klmax) f16klmax = kl;
                        f16n++;
                    }
                }
                if (scored && (flags & PASS_FILL_REF)) {
                    memcpy(ref->logits + si * V, row, (size_t)V * sizeof *row);
                    ref->top1[si] = (int32_t)lab_argmax(row, V);
                }
                if (scored && (flags & PASS_COMPARE)) {
                    const float *rrow = ref->logits + si * V;
                    lab_log_softmax(rrow, V, lq);
                    acc->kl[si] = lab_kl_logp(lq, lp, V);
                    int32_t rt = ref->top1[si];
                    if ((int32_t)lab_argmax(row, V) == rt) agree++;
                    double d = lab_max_abs_diff(row, rrow, V);
                    if (d != d) nan_seen++;
                    else if (d > maxd) maxd = d;
                    double dp = exp(lp[rt]) - exp(lq[rt]);
                    dp2 += dp * dp;
                }
            }
        }
        sc += n_sc_here;
        acc->nll_sum += nll;
        acc->nll_n += nlln;
        acc->f16_kl_sum += f16kl;
        acc->f16_n += f16n;
        if (f16klmax > acc->f16_kl_max) acc->f16_kl_max = f16klmax;
        if (f16dmax > acc->f16_dlogit_max) acc->f16_dlogit_max = f16dmax;
        acc->agree += agree;
        acc->dp2_sum += dp2;
        if (nan_seen) acc->maxdiff = NAN;
        else if (maxd > acc->maxdiff) acc->maxdiff = maxd;
        if (q < n_div) {
            for (int64_t l = 0; l < L; l++)
                for (int site = 0; site < 2; site++) {
                    int64_t Tr = 0;
                    const float *h = vt_session_residual(s, l, site, &Tr);
                    if (!h || Tr != T) {
                        rc = lab_errf(err, errlen, LAB_EINTERNAL, "sequence %lld: no residual capture at layer %lld site %d",
                                      (long long)q, (long long)l, site);
                        goto done;
                    }
                    if (flags & PASS_FILL_REF) {
                        memcpy(ref->resid + ref->resid_off[q] + (size_t)((l * 2 + site) * T * H), h,
                               (size_t)(T * H) * sizeof *h);
                        ref->resid_T[q] = T;
                    }
                    if (flags & PASS_COMPARE) {
                        const float *hr = ref->resid + ref->resid_off[q] + (size_t)((l * 2 + site) * T * H);
                        for (int64_t i = 0; i < T * H; i++) {
                            double dd = (double)h[i] - (double)hr[i];
                            acc->div_num[l * 2 + site] += dd * dd;
                            acc->div_den[l * 2 + site] += (double)hr[i] * (double)hr[i];
                        }
                    }
                }
        }
        if (pg) {
            pg->tokens_done += T;
            progress_show(pg, q + 1, ds->n_seq);
        }
    }
    acc->n_scored = sc;
    vt_sha256_final_hex(&acc->hash, acc->hash_hex);
    if (flags & PASS_FILL_REF) {
        memcpy(ref->hash, acc->hash_hex, 65);
        ref->ready = 1;
    }
    acc->n_probes = vt_session_probe_count(s);
    acc->probes_lost = vt_session_probes_lost(s);
    if (acc->n_probes > 0) {
        if (!(acc->probes = malloc((size_t)acc->n_probes * sizeof *acc->probes))) goto oom;
        for (int64_t i = 0; i < acc->n_probes; i++) acc->probes[i] = *vt_session_probe_at(s, i);
    }
    goto done;
oom:
    rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory (dataset %lld tokens x vocab %lld)", (long long)n_tok,
                  (long long)V);
done:
    if (s) {
        acc->forward_s += vt_session_forward_seconds(s);
        vt_session_free(s);
    }
    free(logits);
    free(scratch);
    if (rc && (flags & PASS_FILL_REF)) ref_cache_free(ref);
    return rc;
}

/* ------------------------------------------------------------ one run */

typedef struct exp_ctx {
    const lab_experiment *e;
    const lab_run_opts   *o;
    lab_run_summary      *sum;
    lab_store            *st;
    vt_model             *m;
    vt_model_info         mi;
    vt_knobset          **ks;          /* [n_arms] */
    char                (*knob_hash)[65];
    char                  model_sha[65], dataset_sha[65], spec_sha[65];
    const char           *code_version;
    char                  host[256], device[128], commit[64];
    ref_cache             ref;
    int                   ref_failed;  /* this process's reference run failed */
    uint8_t              *tried;       /* [n_arms * repeats] done (or given up) by this process */
    int64_t              *arm_run;     /* [n_arms] FINISHED run of repeat 0, for pair tests */
    int                   any_new, busy_noted;
} exp_ctx;

static void fill_identity(exp_ctx *x, int64_t arm, int64_t rep, lab_identity *id) {
    id->experiment = x->e->id;
    id->arm = x->e->arms[arm].name;
    id->repeat = rep;
    id->knob_hash = x->knob_hash[arm];
    id->model_sha256 = x->model_sha;
    id->dataset_sha256 = x->dataset_sha;
    id->code_version = x->code_version;
}

/* Makes the reference cache ready: recomputes the FINISHED reference run
 * (repeat 0) when this process did not run it. *ref_run 0: none available. */
static int ensure_reference(exp_ctx *x, progress *pg, char *err, size_t errlen) {
    if (x->ref.ready) return LAB_OK;
    lab_identity id;
    fill_identity(x, x->e->ref_index, 0, &id);
    int64_t rid = 0;
    char stored[65];
    int rc = lab_store_find_finished(x->st, &id, &rid, stored, err, errlen);
    if (rc || !rid) return rc;
    pass_acc acc = {0};
    int killed = 0;
    char label[160];
    snprintf(label, sizeof label, "%s/%s (reference, recomputed)", x->e->id, x->e->arms[x->e->ref_index].name);
    if (pg) { pg->label = label; pg->t0 = lab_mono(); pg->tokens_done = 0; }
    rc = forward_pass(x->e, x->m, &x->mi, x->ks[x->e->ref_index], PASS_FILL_REF, &x->ref, &acc, pg, &killed, err, errlen);
    if (pg) progress_end(pg);
    x->sum->forward_s += acc.forward_s;
    if (!rc) {
        x->ref.run_id = rid;
        x->ref.recomputed = 1;
        x->ref.hash_match = !strcmp(stored, acc.hash_hex);
        if (!x->ref.hash_match)
            fprintf(stderr, "vtlab: %s: warning: the recomputed reference logits (run %lld) differ from the stored "
                            "hash; comparisons record reference_hash_match = 0\n", x->e->path, (long long)rid);
    }
    pass_acc_free(&acc);
    return rc;
}

/* Checks the arm's expectations against its probes. */
static void check_expect(const lab_arm *a, const pass_acc *acc, lab_expect_result *out) {
    for (int64_t i = 0; i < a->n_expect; i++) {
        lab_expect_result *x = &out[i];
        memset(x, 0, sizeof *x);
        snprintf(x->site, sizeof x->site, "%s", a->expect_sites[i]);
        snprintf(x->expected, sizeof x->expected, "%s", a->expect_dtypes[i]);
        x->ok = 1;
        for (int64_t p = 0; p < acc->n_probes; p++) {
            const vt_probe *pr = &acc->probes[p];
            if (strcmp(pr->site, x->site)) continue;
            x->records++;
            char tok[16];   /* ",bf16," style match: "f16" must not be found inside "bf16" */
            snprintf(tok, sizeof tok, ",%s,", pr->dtype);
            char seen[sizeof x->seen + 2];
            snprintf(seen, sizeof seen, ",%s,", x->seen);
            if (!strstr(seen, tok) && strlen(x->seen) + strlen(pr->dtype) + 2 < sizeof x->seen) {
                if (*x->seen) strcat(x->seen, ",");
                strcat(x->seen, pr->dtype);
            }
            if (x->ok && strcmp(pr->dtype, x->expected)) {
                x->ok = 0;
                if (pr->layer >= 0)
                    snprintf(x->reason, sizeof x->reason,
                             "knob did not take effect: arm expects %s %s, probe saw %s (layer %d)", x->site,
                             x->expected, pr->dtype, pr->layer);
                else
                    snprintf(x->reason, sizeof x->reason, "knob did not take effect: arm expects %s %s, probe saw %s",
                             x->site, x->expected, pr->dtype);
            }
        }
        if (x->records == 0) {
            x->ok = 0;
            snprintf(x->reason, sizeof x->reason,
                     "knob did not take effect: arm expects %s %s, but no probe record exists at that site", x->site,
                     x->expected);
        }
    }
}

static double kl_quantile(const double *kl, int64_t n, double q) {
    double *tmp = malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return NAN;
    memcpy(tmp, kl, (size_t)n * sizeof *tmp);
    double v = lab_quantile(tmp, n, q);
    free(tmp);
    return v;
}

/* Everything of one run that goes to the database, built from a pass. */
typedef struct run_record {
    int               *probe_ok;     /* [n_probes] */
    lab_expect_result *ex;           /* [n_expect] */
    const char       **kn, **kv;     /* [n_knobs] */
    int               *knum;         /* [n_knobs] */
    lab_comparison     cmp;
    lab_verdict_row    vr;
    lab_buf            reason;
    const char        *mn[8];
    double             mv[8];
    int64_t            nm;
    int                ok;
} run_record;

static void run_record_free(run_record *r) {
    free(r->probe_ok);
    free(r->ex);
    free(r->kn);
    free(r->kv);
    free(r->knum);
    free(r->cmp.div_layer);
    free(r->cmp.div_site);
    free(r->cmp.div_value);
    lab_buf_free(&r->reason);
}

/* Turns a finished pass into the rows of the run: probe invariants,
 * expectations, resolved knobs, metrics, comparison and verdict. */
static int build_record(exp_ctx *x, int64_t arm, const pass_acc *acc, int compare, run_record *r,
                        char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const lab_arm *a = &e->arms[arm];
    int64_t nk = vt_knob_count();
    r->probe_ok = calloc((size_t)(acc->n_probes > 0 ? acc->n_probes : 1), sizeof *r->probe_ok);
    r->ex = calloc((size_t)(a->n_expect > 0 ? a->n_expect : 1), sizeof *r->ex);
    r->kn = calloc((size_t)nk + 1, sizeof *r->kn);
    r->kv = calloc((size_t)nk + 1, sizeof *r->kv);
    r->knum = calloc((size_t)nk + 1, sizeof *r->knum);
    if (!r->probe_ok || !r->ex || !r->kn || !r->kv || !r->knum) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    r->ok = 1;
    for (int64_t i = 0; i < acc->n_probes; i++) {
        const vt_probe *p = &acc->probes[i];
        /* rows_unwritten is -1 when not audited: only a positive count fails. */
        r->probe_ok[i] = p->violations == 0 && p->rows_unwritten <= 0;
        if (!r->probe_ok[i]) {
            if (r->ok) lab_buf_printf(&r->reason, "probe %s layer %d: %s", p->site, p->layer,
                                      *p->detail ? p->detail : "invariant violated");
            r->ok = 0;
        }
    }
    if (acc->probes_lost) {
        lab_buf_printf(&r->reason, "%s%lld probe record(s) lost (out of memory): the probes cannot vouch for this run",
                       r->reason.len ? "; " : "", (long long)acc->probes_lost);
        r->ok = 0;
    }
    check_expect(a, acc, r->ex);
    for (int64_t i = 0; i < a->n_expect; i++)
        if (!r->ex[i].ok) {
            lab_buf_printf(&r->reason, "%s%s", r->reason.len ? "; " : "", r->ex[i].reason);
            r->ok = 0;
        }
    if (r->reason.oom) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
    for (int64_t i = 0; i < nk; i++) {
        const vt_knob_info *ki = vt_knob_at((int)i);
        r->kn[i] = ki->name;
        r->kv[i] = vt_knobset_get(x->ks[arm], ki->name);
        r->knum[i] = ki->numeric;
    }
    if (e->metrics & LAB_M_PPL) {
        double nll = acc->nll_n ? acc->nll_sum / (double)acc->nll_n : NAN;
        r->mn[r->nm] = "perplexity"; r->mv[r->nm++] = exp(nll);
        r->mn[r->nm] = "nll_mean"; r->mv[r->nm++] = nll;
    }
    r->mn[r->nm] = "tokens_per_s";
    r->mv[r->nm++] = acc->forward_s > 0 ? (double)e->ds.offsets[e->ds.n_seq] / acc->forward_s : NAN;
    if (acc->full) {
        r->mn[r->nm] = "f16_store_kl_mean"; r->mv[r->nm++] = acc->f16_n ? acc->f16_kl_sum / (double)acc->f16_n : NAN;
        r->mn[r->nm] = "f16_store_kl_max"; r->mv[r->nm++] = acc->f16_kl_max;
        r->mn[r->nm] = "f16_store_max_abs_dlogit"; r->mv[r->nm++] = acc->f16_dlogit_max;
    }
    if (!compare) return LAB_OK;

    lab_comparison *c = &r->cmp;
    c->reference_run_id = x->ref.run_id;
    c->reference_recomputed = x->ref.recomputed;
    c->reference_hash_match = x->ref.recomputed ? x->ref.hash_match : -1;
    c->n_scored = acc->n_scored;
    c->top1_k = acc->agree;
    c->top1_n = acc->n_scored;
    lab_wilson(c->top1_k, c->top1_n, LAB_Z95, &c->top1_lo, &c->top1_hi);
    c->kl_mean = c->kl_p99 = c->kl_max = c->max_abs_dlogit = c->rms_dp = c->mcnemar_p = NAN;
    if (e->metrics & LAB_M_KL) {
        double sum = 0, mx = 0;
        for (int64_t i = 0; i < acc->n_scored; i++) {
            sum += acc->kl[i];
            if (acc->kl[i] > mx) mx = acc->kl[i];
        }
        c->kl_mean = acc->n_scored ? sum / (double)acc->n_scored : NAN;
        c->kl_max = mx;
        c->kl_p99 = kl_quantile(acc->kl, acc->n_scored, 0.99);
    }
    if (e->metrics & LAB_M_MAXDIFF) c->max_abs_dlogit = acc->maxdiff;
    if (e->metrics & LAB_M_RMSDP) c->rms_dp = acc->n_scored ? sqrt(acc->dp2_sum / (double)acc->n_scored) : NAN;
    /* Outcome "agrees with the reference's top-1": the reference agrees with
     * itself, so b = disagreements and c = 0. Pairs of arms get their own
     * test in pair_tests. */
    c->mcnemar_b = c->top1_n - c->top1_k;
    c->mcnemar_c = 0;
    if (e->metrics & LAB_M_MCNEMAR) c->mcnemar_p = lab_mcnemar_exact(c->mcnemar_b, 0);
    c->first_div_layer = -1;
    if (acc->div_num) {
        int64_t L = x->mi.n_layers;
        c->div_sequences = x->ref.n_div_seq;
        c->div_tolerance = e->div_tolerance;
        c->n_div = L * 2;
        c->div_layer = calloc((size_t)(L * 2), sizeof *c->div_layer);
        c->div_site = calloc((size_t)(L * 2), sizeof *c->div_site);
        c->div_value = calloc((size_t)(L * 2), sizeof *c->div_value);
        if (!c->div_layer || !c->div_site || !c->div_value) return lab_errf(err, errlen, LAB_ENOMEM, "out of memory");
        for (int64_t i = 0; i < L * 2; i++) {
            c->div_layer[i] = i / 2;
            c->div_site[i] = (int)(i % 2);
            double den = acc->div_den[i], num = acc->div_num[i];
            c->div_value[i] = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
            if (c->first_div_layer < 0 && c->div_value[i] > e->div_tolerance) {
                c->first_div_layer = i / 2;
                c->first_div_site = (int)(i % 2);
                c->first_div_value = c->div_value[i];
            }
        }
    }
    if (e->has_decision) {
        lab_verdict_row *v = &r->vr;
        snprintf(v->metric, sizeof v->metric, "%s", e->decision_metric);
        v->threshold = e->decision_threshold;
        v->direction_ge = e->decision_ge;
        v->k = c->top1_k;
        v->n = c->top1_n;
        v->value = v->n ? (double)v->k / (double)v->n : NAN;
        v->lo = c->top1_lo;
        v->hi = c->top1_hi;
        snprintf(v->verdict, sizeof v->verdict, "%s", lab_verdict_name(lab_decide(v->lo, v->hi, v->threshold, v->direction_ge)));
    }
    return LAB_OK;
}

/* Executes one claimed run and records it as FINISHED, FAILED or KILLED.
 * Returns LAB_OK when the outcome was recorded; another status only when
 * the database itself failed (err filled). */
static int execute_run(exp_ctx *x, int64_t arm, int64_t rep, int64_t run_id, int *finished, int *assert_ok,
                       char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    const lab_arm *a = &e->arms[arm];
    int fill = arm == e->ref_index && rep == 0;
    double t0 = lab_mono();
    char rerr[1024] = "";
    const char *status = "FAILED";
    int rc;
    pass_acc acc = {0};
    run_record rec = {0};
    *finished = 0;
    *assert_ok = 1;

    char label[160];
    if (e->repeats > 1) snprintf(label, sizeof label, "%s/%s #%lld", e->id, a->name, (long long)rep);
    else snprintf(label, sizeof label, "%s/%s", e->id, a->name);
    progress pg = {x->o->progress, label, lab_mono(), e->ds.offsets[e->ds.n_seq], 0};
    if (!fill && (rc = ensure_reference(x, x->o->progress ? &pg : NULL, rerr, sizeof rerr))) {
        if (lab_interrupted) status = "KILLED";   /* Ctrl-C while the reference was recomputed */
        goto failed;
    }
    /* Every run but the reference's repeat 0 is compared with it: without
     * the reference there is nothing to finish (run_pass waits for it). */
    if (!fill && !x->ref.ready) {
        snprintf(rerr, sizeof rerr, "no FINISHED reference run (%s, repeat 0) to compare with",
                 e->arms[e->ref_index].name);
        goto failed;
    }
    int compare = !fill;
    pg.label = label;
    pg.t0 = lab_mono();
    pg.tokens_done = 0;

    int killed = 0;
    int flags = PASS_RECORD | (fill ? PASS_FILL_REF : 0) | (compare ? PASS_COMPARE : 0);
    rc = forward_pass(e, x->m, &x->mi, x->ks[arm], flags, &x->ref, &acc, x->o->progress ? &pg : NULL, &killed,
                      rerr, sizeof rerr);
    progress_end(&pg);
    x->sum->forward_s += acc.forward_s;
    if (rc) {
        if (killed) status = "KILLED";
        goto failed;
    }
    if (fill) {
        x->ref.run_id = run_id;
        x->ref.recomputed = 0;
        x->ref.hash_match = -1;
    }
    if ((rc = build_record(x, arm, &acc, compare, &rec, rerr, sizeof rerr))) goto failed;

    lab_run_result res = {0};
    res.n_sequences = e->ds.n_seq;
    res.n_tokens = e->ds.offsets[e->ds.n_seq];
    res.n_scored = acc.n_scored;
    res.forward_s = acc.forward_s;
    memcpy(res.logits_sha256, acc.hash_hex, 65);
    res.assertions_ok = rec.ok;
    res.assertion_reason = rec.ok ? NULL : rec.reason.data;
    res.n_knobs = vt_knob_count();
    res.knob_names = rec.kn;
    res.knob_values = rec.kv;
    res.knob_numeric = rec.knum;
    res.n_probes = acc.n_probes;
    res.probes = acc.probes;
    res.probe_ok = rec.probe_ok;
    res.n_expect = a->n_expect;
    res.expect = rec.ex;
    res.n_metrics = rec.nm;
    res.metric_names = rec.mn;
    res.metric_values = rec.mv;
    res.top_k = acc.top_k;
    res.offsets = e->ds.offsets;
    res.topk_ids = acc.topk_ids;
    res.topk_logprobs = acc.topk_lp;
    res.vocab = x->mi.vocab_size;
    res.full_f16 = acc.full;
    res.cmp = compare ? &rec.cmp : NULL;
    /* a reference repeat is compared with repeat 0 (repeatability) but gets no verdict */
    res.verdict = compare && arm != e->ref_index && e->has_decision ? &rec.vr : NULL;
    res.wall_s = lab_mono() - t0;
    rc = lab_store_finish(x->st, run_id, &res, err, errlen);
    if (rc) {
        /* Nothing of the result was written; say why on the run rather than
         * leave it RUNNING for the next sweep to find dead (best effort: the
         * database may be what failed). */
        char aerr[256];
        x->sum->runs_failed++;
        printf("run %-4lld %-34s FAILED  %s\n", (long long)run_id, label, err);
        lab_store_abort(x->st, run_id, "FAILED", err, aerr, sizeof aerr);
    } else {
        const lab_comparison *c = &rec.cmp;
        *finished = 1;
        *assert_ok = rec.ok;
        x->sum->runs_done++;
        printf("run %-4lld %-34s FINISHED  %s", (long long)run_id, label, rec.ok ? "assertions ok" : "ASSERTIONS FAILED");
        if (compare)
            printf("  top1 %lld/%lld [%.3f, %.3f]  KL %.3g%s%s", (long long)c->top1_k, (long long)c->top1_n,
                   c->top1_lo, c->top1_hi, c->kl_mean, *rec.vr.verdict ? "  " : "", rec.vr.verdict);
        if (compare && c->first_div_layer >= 0)
            printf("  diverges at layer %lld %s", (long long)c->first_div_layer, c->first_div_site ? "ffn" : "attn");
        printf("\n");
        if (!rec.ok) printf("          %s\n", rec.reason.data);
        fflush(stdout);
    }
    run_record_free(&rec);
    pass_acc_free(&acc);
    return rc;
failed:
    run_record_free(&rec);
    pass_acc_free(&acc);
    x->sum->runs_failed++;
    fprintf(stderr, "vtlab: %s: arm %s: run %lld %s: %s\n", e->path, a->name, (long long)run_id, status, rerr);
    printf("run %-4lld %-34s %s  %s\n", (long long)run_id, label, status, rerr);
    return lab_store_abort(x->st, run_id, status, rerr, err, errlen);
}

/* ------------------------------------------------------------ the experiment */

static void read_device(exp_ctx *x, const char *backend) {
    vt_device_name(backend, x->device, sizeof x->device);
}

/* McNemar between each pair of non-reference arms (repeat 0), on agreement
 * with the reference's top-1 at the same positions. */
static int pair_tests(exp_ctx *x, char *err, size_t errlen) {
    const int64_t *arm_run = x->arm_run;
    const lab_experiment *e = x->e;
    if (!(e->metrics & LAB_M_MCNEMAR) || !x->ref.run_id) return LAB_OK;
    int32_t *ref = NULL;
    int64_t nr = 0;
    int rc = lab_store_top1(x->st, x->ref.run_id, &ref, &nr, err, errlen);
    if (rc) return rc;
    for (int64_t i = 0; i < e->n_arms && !rc; i++) {
        if (i == e->ref_index || !arm_run[i]) continue;
        int32_t *ai = NULL;
        int64_t na = 0;
        if ((rc = lab_store_top1(x->st, arm_run[i], &ai, &na, err, errlen))) break;
        for (int64_t j = i + 1; j < e->n_arms && !rc; j++) {
            if (j == e->ref_index || !arm_run[j]) continue;
            int32_t *aj = NULL;
            int64_t nj = 0;
            if ((rc = lab_store_top1(x->st, arm_run[j], &aj, &nj, err, errlen))) break;
            if (na == nr && nj == nr) {
                int64_t b = 0, c = 0;
                for (int64_t p = 0; p < nr; p++) {
                    int ri = ai[p] == ref[p], rj = aj[p] == ref[p];
                    b += ri && !rj;
                    c += !ri && rj;
                }
                rc = lab_store_put_pair_test(x->st, arm_run[i], arm_run[j], x->ref.run_id, nr, b, c,
                                             lab_mcnemar_exact(b, c), err, errlen);
            }
            free(aj);
        }
        free(ai);
    }
    free(ref);
    return rc;
}

/* One pass over the runs of the experiment. *busy counts runs this pass
 * could not do because another live process holds them (or holds the
 * reference they need); the caller waits and passes again. x->tried marks
 * what this process already did, so a retry pass (and --force) never redoes
 * its own work. */
static int run_pass(exp_ctx *x, int *busy, char *err, size_t errlen) {
    const lab_experiment *e = x->e;
    lab_provenance pv = {0};
    pv.experiment_sha256 = x->spec_sha;
    pv.git_commit = x->commit;
    pv.git_dirty = vt_build_dirty();
    pv.build_flags = vt_build_flags();
    pv.compiler = vt_build_compiler();
    pv.host = x->host;
    pv.pid = getpid();
    pv.pid_start = lab_pid_start(pv.pid);
    pv.score = e->score_last ? "last" : "all";
    pv.top_k = e->top_k;
    pv.device = x->device;
    *busy = 0;
    int rc = LAB_OK;
    /* The reference arm first, then the others in file order. */
    for (int64_t k = 0; k < e->n_arms && !rc; k++) {
        int64_t arm = k == 0 ? e->ref_index : (k <= e->ref_index ? k - 1 : k);
        const lab_arm *a = &e->arms[arm];
        if (x->o->only_arm && arm != e->ref_index && strcmp(a->name, x->o->only_arm)) continue;
        int is_ref = arm == e->ref_index;
        for (int64_t rep = 0; rep < e->repeats && !rc; rep++) {
            uint8_t *tried = &x->tried[arm * e->repeats + rep];
            if (*tried) continue;
            if (lab_interrupted) { rc = lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal"); break; }
            lab_identity id;
            fill_identity(x, arm, rep, &id);
            /* Every run but the reference's repeat 0 (a non-reference arm, or a
             * repeat of the reference) is compared with the FINISHED reference
             * repeat 0: while another process holds that run, wait for it. */
            if (!(is_ref && rep == 0) && !x->ref.ready && !x->ref.run_id) {
                if (x->ref_failed) {
                    *tried = 1;
                    x->sum->runs_failed++;
                    fprintf(stderr, "vtlab: %s: arm %s repeat %lld not run: the reference arm %s failed\n", e->path,
                            a->name, (long long)rep, e->arms[e->ref_index].name);
                    continue;
                }
                lab_identity rid;
                int64_t rrun = 0;
                fill_identity(x, e->ref_index, 0, &rid);
                if ((rc = lab_store_find_finished(x->st, &rid, &rrun, NULL, err, errlen))) break;
                if (!rrun) { (*busy)++; continue; }
            }
            pv.is_reference = is_ref;
            pv.backend = vt_knobset_get(x->ks[arm], "VT_BACKEND");
            pv.expected_assertions = a->expect_fail ? "fail" : "pass";
            int kind = 0;
            int64_t run_id = 0, stale = 0, redone = 0;
            if ((rc = lab_store_claim_ex(x->st, &id, &pv, x->o->force, &kind, &run_id, &stale, &redone, err, errlen)))
                break;
            if (redone) {
                x->sum->stale_redone++;
                fprintf(stderr, "vtlab: run %lld (%s/%s #%lld) was FINISHED but incomplete: marked FAILED, redoing\n",
                        (long long)redone, e->id, a->name, (long long)rep);
            }
            if (stale) {
                x->sum->stale_redone++;
                fprintf(stderr, "vtlab: run %lld (%s/%s) was left RUNNING by a dead process: marked KILLED, redoing\n",
                        (long long)stale, e->id, a->name);
            }
            if (kind == LAB_BUSY) {
                (*busy)++;
                if (!x->busy_noted) {
                    x->busy_noted = 1;
                    fprintf(stderr, "vtlab: %s/%s: run %lld is being run by another process; waiting for it\n",
                            e->id, a->name, (long long)run_id);
                }
                continue;
            }
            *tried = 1;
            int assert_ok = 1, finished = 0;
            if (kind == LAB_DONE) {
                x->sum->runs_skipped++;
                /* The recorded outcome still counts toward the exit status. */
                /* A failed read must not count as "assertions passed": for a replay arm that
                 * would be reported as an unexpected outcome (and the sweep exit 1). */
                sqlite3_stmt *s = NULL;
                int step = SQLITE_ERROR;
                if (sqlite3_prepare_v2(lab_store_db(x->st), "SELECT assertions_ok FROM runs WHERE id = ?1", -1, &s,
                                       NULL) == SQLITE_OK) {
                    sqlite3_bind_int64(s, 1, run_id);
                    step = sqlite3_step(s);
                    if (step == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
                        assert_ok = sqlite3_column_int(s, 0);
                }
                if (step != SQLITE_ROW) {
                    rc = lab_errf(err, errlen, LAB_EIO, "reading finished run %lld: %s", (long long)run_id,
                                  sqlite3_errmsg(lab_store_db(x->st)));
                    sqlite3_finalize(s);
                    break;
                }
                sqlite3_finalize(s);
                printf("run %-4lld %s/%s: already FINISHED with this identity, skipped (--force reruns it)\n",
                       (long long)run_id, e->id, a->name);
                finished = 1;
            } else {
                x->any_new = 1;
                if ((rc = execute_run(x, arm, rep, run_id, &finished, &assert_ok, err, errlen))) break;
                if (!finished && is_ref && rep == 0) x->ref_failed = 1;
            }
            if (finished && (assert_ok == a->expect_fail)) {
                x->sum->check_failures++;
                fprintf(stderr, "vtlab: %s: arm %s: runtime assertions %s, but the arm expects them to %s\n",
                        e->path, a->name, assert_ok ? "passed" : "failed", a->expect_fail ? "fail" : "pass");
            }
            if (finished && rep == 0) x->arm_run[arm] = run_id;
            if (finished && is_ref && rep == 0 && !x->ref.ready) x->ref.run_id = run_id;
        }
    }
    return rc;
}

int lab_run_experiment(const char *path, const lab_run_opts *o, lab_run_summary *sum, char *err, size_t errlen) {
    double t0 = lab_mono();
    exp_ctx x = {0};
    lab_experiment *e = NULL;
    char *dir = NULL, verr[1024] = "";
    int rc = lab_experiment_load(&e, path, err, errlen);
    if (rc) return rc;
    x.e = e;
    x.o = o;
    x.sum = sum;
    if (o->only_arm && lab_experiment_arm(e, o->only_arm) < 0) {
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: --arm %s: no arm of that name", path, o->only_arm);
        goto done;
    }
    if ((rc = lab_model_dir(e, &dir, err, errlen))) goto done;
    if ((rc = vt_model_open(&x.m, dir, verr, sizeof verr))) {
        rc = lab_errf(err, errlen, rc == VT_STATUS_INPUT ? LAB_EINPUT : rc, "%s: model %s: %s", path, dir, verr);
        goto done;
    }
    vt_model_get_info(x.m, &x.mi);
    if ((rc = lab_dataset_prepare(e, x.mi.vocab_size, err, errlen))) goto done;
    x.ks = calloc((size_t)e->n_arms, sizeof *x.ks);
    x.knob_hash = calloc((size_t)e->n_arms, sizeof *x.knob_hash);
    if (!x.ks || !x.knob_hash) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    for (int64_t i = 0; i < e->n_arms; i++) {
        if ((rc = lab_resolve_knobs(e, i, environ, &x.ks[i], err, errlen))) goto done;
        vt_knobset_hash(x.ks[i], x.knob_hash[i]);
    }
    if ((rc = lab_model_sha256(dir, x.model_sha, err, errlen))) goto done;
    size_t clen = 0;
    char *canon = lab_dataset_canonical(&e->ds, &clen);
    if (!canon) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    vt_sha256_hex(canon, clen, x.dataset_sha);
    free(canon);
    vt_sha256_hex(e->spec_json, strlen(e->spec_json), x.spec_sha);
    x.code_version = vt_build_info();
    snprintf(x.commit, sizeof x.commit, "%s", vt_build_commit());
    if (gethostname(x.host, sizeof x.host) != 0) snprintf(x.host, sizeof x.host, "unknown");
    x.host[sizeof x.host - 1] = 0;
    read_device(&x, vt_knobset_get(x.ks[e->ref_index], "VT_BACKEND"));

    /* Everything above is validation: only now is the database touched. */
    if ((rc = lab_store_open(&x.st, o->db_path, err, errlen))) goto done;
    if ((rc = lab_store_put_spec(x.st, x.spec_sha, e->id, path, e->spec_json, err, errlen))) goto done;
    int64_t reaped = 0;
    if ((rc = lab_store_reap(x.st, x.host, &reaped, err, errlen))) goto done;
    if (reaped) {
        sum->stale_redone += reaped;
        fprintf(stderr, "vtlab: %lld run(s) left RUNNING by dead processes marked KILLED\n", (long long)reaped);
    }
    x.tried = calloc((size_t)(e->n_arms * e->repeats), 1);
    x.arm_run = calloc((size_t)e->n_arms, sizeof *x.arm_run);
    if (!x.tried || !x.arm_run) { rc = lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); goto done; }
    double wait_start = 0;
    for (;;) {
        int busy = 0;
        if ((rc = run_pass(&x, &busy, err, errlen))) goto done;
        if (!busy) break;
        /* Another live process holds runs we need (or the reference): wait
         * and pass again; what it finishes is skipped. A holder on another
         * host cannot be checked for liveness, so waiting is bounded. */
        if (wait_start == 0) wait_start = lab_mono();
        if (lab_mono() - wait_start > LAB_WAIT_MAX_S) {
            sum->runs_busy += busy;
            fprintf(stderr, "vtlab: %s: %d run(s) still held by another process after %d s; left to it\n", path,
                    busy, LAB_WAIT_MAX_S);
            break;
        }
        usleep(300 * 1000);
        if (lab_interrupted) { rc = lab_errf(err, errlen, LAB_EINTERNAL, "interrupted by a signal"); goto done; }
    }
    if (x.any_new) rc = pair_tests(&x, err, errlen);
done:
    free(x.tried);
    free(x.arm_run);
    ref_cache_free(&x.ref);
    for (int64_t i = 0; x.ks && i < e->n_arms; i++) vt_knobset_free(x.ks[i]);
    free(x.ks);
    free(x.knob_hash);
    lab_store_close(x.st);
    vt_model_free(x.m);
    free(dir);
    lab_experiment_free(e);
    sum->wall_s += lab_mono() - t0;
    return rc;
}
