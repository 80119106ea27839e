/*
 * store_merge.c — the merge's part of results.db (see store_merge.h): the
 * reads of a shard database (its shard runs with their run_sequences,
 * run_shards, logits and records; its schema checked against the one its
 * version claims) and the writes of merged_shards. The shard rows it reads
 * are written with every run by store_finish.c.
 */
#include "store_merge.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_internal.h"
#include "util.h"

static char *dup_col(sqlite3_stmt *s, int i) {
    if (sqlite3_column_type(s, i) == SQLITE_NULL) return NULL;
    return strdup((const char *)sqlite3_column_text(s, i));
}

void lab_shard_runs_free(lab_shard_run *v, int64_t n) {
    for (int64_t i = 0; v && i < n; i++) {
        lab_shard_run *r = &v[i];
        char *f[] = {r->experiment, r->arm, r->knob_hash, r->model_sha256, r->dataset_sha256, r->code_version,
                     r->shard, (char *)r->info.decision_metric, (char *)r->info.task, (char *)r->info.node,
                     (char *)r->info.slurm_job_id, (char *)r->info.slurm_array_job_id,
                     (char *)r->info.slurm_array_task_id, r->experiment_sha256, r->git_commit, r->build_flags,
                     r->compiler, r->backend, r->device, r->host, r->score, r->expected_assertions, r->layer_kinds,
                     r->engine_hello, r->started_at, r->finished_at, r->logits_sha256};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) free(f[k]);
    }
    free(v);
}

/* Columns c.. of a shard run's row into h (its run_shards row); returns the
 * column after them. */
static int shard_info_row(sqlite3_stmt *s, int c, lab_shard_info *h) {
    h->index = sqlite3_column_int64(s, c++);
    h->count = sqlite3_column_int64(s, c++);
    h->seq_lo = sqlite3_column_int64(s, c++);
    h->seq_hi = sqlite3_column_int64(s, c++);
    h->n_seq_total = sqlite3_column_int64(s, c++);
    h->n_tokens_total = sqlite3_column_int64(s, c++);
    h->n_scored_total = sqlite3_column_int64(s, c++);
    h->metrics = (unsigned)sqlite3_column_int64(s, c++);
    h->div_sequences = sqlite3_column_int64(s, c++);
    h->div_tolerance = sqlite3_column_double(s, c++);
    h->has_decision = sqlite3_column_type(s, c) != SQLITE_NULL;
    h->decision_metric = dup_col(s, c++);
    h->decision_threshold = sqlite3_column_double(s, c++);
    h->decision_ge = sqlite3_column_int(s, c++);
    h->n_layers = sqlite3_column_int64(s, c++);
    h->probes_lost = sqlite3_column_int64(s, c++);
    h->task = dup_col(s, c++);
    h->node = dup_col(s, c++);
    h->slurm_job_id = dup_col(s, c++);
    h->slurm_array_job_id = dup_col(s, c++);
    h->slurm_array_task_id = dup_col(s, c++);
    return c;
}

/* One row of lab_store_shard_runs' statement into r. */
static void shard_run_row(sqlite3_stmt *s, lab_shard_run *r) {
    int c = 0;
    r->run_id = sqlite3_column_int64(s, c++);
    r->experiment = dup_col(s, c++);
    r->arm = dup_col(s, c++);
    r->repeat = sqlite3_column_int64(s, c++);
    r->knob_hash = dup_col(s, c++);
    r->model_sha256 = dup_col(s, c++);
    r->dataset_sha256 = dup_col(s, c++);
    r->code_version = dup_col(s, c++);
    r->shard = dup_col(s, c++);
    r->is_reference = sqlite3_column_int(s, c++);
    c = shard_info_row(s, c, &r->info);
    r->experiment_sha256 = dup_col(s, c++);
    r->git_commit = dup_col(s, c++);
    r->build_flags = dup_col(s, c++);
    r->compiler = dup_col(s, c++);
    r->backend = dup_col(s, c++);
    r->device = dup_col(s, c++);
    r->host = dup_col(s, c++);
    r->score = dup_col(s, c++);
    r->expected_assertions = dup_col(s, c++);
    r->layer_kinds = dup_col(s, c++);
    r->engine_hello = dup_col(s, c++);
    r->started_at = dup_col(s, c++);
    r->finished_at = dup_col(s, c++);
    r->logits_sha256 = dup_col(s, c++);
    r->git_dirty = sqlite3_column_int(s, c++);
    r->top_k = sqlite3_column_int64(s, c++);
    r->n_sequences = sqlite3_column_int64(s, c++);
    r->n_tokens = sqlite3_column_int64(s, c++);
    r->n_scored = sqlite3_column_int64(s, c++);
    r->wall_s = sqlite3_column_double(s, c++);
    r->forward_s = sqlite3_column_double(s, c++);
    r->ref_recomputed = sqlite3_column_type(s, c) == SQLITE_NULL ? 0 : sqlite3_column_int(s, c);
    c++;
    r->ref_hash_match = sqlite3_column_type(s, c) == SQLITE_NULL ? -1 : sqlite3_column_int(s, c);
}

int lab_store_shard_runs(lab_store *st, lab_shard_run **out, int64_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    int have = 0, rc = lab_store_has_table(st, "run_shards", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep_as(st,
            "SELECT r.id, r.experiment, r.arm, r.repeat_idx, r.knob_hash, r.model_sha256, r.dataset_sha256,"
            " r.code_version, r.shard, r.is_reference, h.shard_index, h.shard_count, h.seq_lo, h.seq_hi,"
            " h.n_seq_total, h.n_tokens_total, h.n_scored_total, h.metrics, h.div_sequences, h.div_tolerance,"
            " h.decision_metric, h.decision_threshold, h.decision_ge, h.n_layers, h.probes_lost, h.task, h.node,"
            " h.slurm_job_id, h.slurm_array_job_id, h.slurm_array_task_id, r.experiment_sha256, r.git_commit,"
            " r.build_flags, r.compiler, r.backend, r.device, r.host, r.score, r.expected_assertions, r.layer_kinds,"
            " r.engine_hello, r.started_at, r.finished_at, r.logits_sha256, r.git_dirty, r.top_k, r.n_sequences,"
            " r.n_tokens, r.n_scored, r.wall_s, r.forward_s,"
            " (SELECT c.reference_recomputed FROM comparisons c WHERE c.run_id = r.id),"
            " (SELECT c.reference_hash_match FROM comparisons c WHERE c.run_id = r.id)"
            " FROM runs r JOIN run_shards h ON h.run_id = r.id WHERE r.status = 'FINISHED' ORDER BY r.id",
            &s, "reading shard runs", err, errlen)))
        return rc;
    int64_t cap = 0;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        lab_shard_run *r = lab_sq_append((void **)out, n, &cap, sizeof *r);
        if (!r) { sqlite3_finalize(s); return lab_errf(err, errlen, LAB_ENOMEM, "out of memory"); }
        shard_run_row(s, r);
        if (!r->experiment || !r->arm || !r->code_version || !r->logits_sha256) {
            sqlite3_finalize(s);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: a shard run without its identity or logits hash",
                            st->path, (long long)r->run_id);
        }
    }
    return lab_sq_done(st, s, step, "reading shard runs", err, errlen);
}

void lab_shard_data_free(lab_shard_data *d) {
    free(d->seq);
    free(d->div_buf);
    free(d->kl);
    free(d->dp);
    free(d->dnll);
    free(d->n_pos);
    free(d->topk_ids);
    free(d->topk_lp);
    free(d->full);
    free(d->probes);
    free(d->ex);
    for (int64_t i = 0; i < d->n_kn; i++) {
        free(d->kn[i]);
        free(d->kv[i]);
    }
    free(d->kn);
    free(d->kv);
    free(d->knum);
    free(d->spec_sha);
    free(d->spec_id);
    free(d->spec_file);
    free(d->spec_json);
    memset(d, 0, sizeof *d);
}

/* A blob of n f64 into dst; LAB_EINPUT when its size is not n values. */
static int blob_f64(lab_store *st, sqlite3_stmt *s, int i, double *dst, int64_t n, const char *what, char *err,
                    size_t errlen) {
    if (n == 0) return LAB_OK;
    if (sqlite3_column_bytes(s, i) != (int)((size_t)n * sizeof(double)))
        return lab_errf(err, errlen, LAB_EINPUT, "%s: %s: blob of %d bytes, expected %lld values", st->path, what,
                        sqlite3_column_bytes(s, i), (long long)n);
    memcpy(dst, sqlite3_column_blob(s, i), (size_t)n * sizeof(double));
    return LAB_OK;
}

#define OOM() lab_errf(err, errlen, LAB_ENOMEM, "out of memory")

/* run_sequences of r in sequence order. */
static int load_sequences(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    int64_t nseq = r->info.seq_hi - r->info.seq_lo, L4 = r->info.n_layers * 4;
    d->n_seq = nseq;
    d->seq = calloc((size_t)(nseq > 0 ? nseq : 1), sizeof *d->seq);
    d->div_buf = calloc((size_t)(nseq * L4 + 1), sizeof *d->div_buf);
    d->kl = malloc((size_t)(r->n_scored + 1) * sizeof(double));
    d->dp = malloc((size_t)(r->n_scored + 1) * sizeof(double));
    d->dnll = malloc((size_t)(r->n_scored + 1) * sizeof(double));
    if (!d->seq || !d->div_buf || !d->kl || !d->dp || !d->dnll) return OOM();
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT seq, n_pos, n_scored, logits_sha256, nll_sum, nll_n, f16_kl_sum, f16_kl_max,"
                                " f16_dlogit_max, f16_n, compared, agree, dp2_sum, maxd, kl, dp, dnll, div"
                                " FROM run_sequences WHERE run_id = ?1 ORDER BY seq", &s, "reading run_sequences",
                            err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    int64_t q = 0, sc = 0;
    int step;
    while (!rc && (step = sqlite3_step(s)) == SQLITE_ROW) {
        if (q >= nseq || sqlite3_column_int64(s, 0) != r->info.seq_lo + q) {
            rc = lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: run_sequences do not cover its shard's sequences "
                          "[%lld, %lld)", st->path, (long long)r->run_id, (long long)r->info.seq_lo,
                          (long long)r->info.seq_hi);
            break;
        }
        lab_seq_stat *x = &d->seq[q];
        x->n_pos = sqlite3_column_int64(s, 1);
        x->n_scored = sqlite3_column_int64(s, 2);
        lab_sq_col_copy(s, 3, x->logits_sha256, sizeof x->logits_sha256);
        x->nll_sum = sqlite3_column_double(s, 4);
        x->nll_n = sqlite3_column_int64(s, 5);
        x->f16_kl_sum = sqlite3_column_double(s, 6);
        x->f16_kl_max = sqlite3_column_double(s, 7);
        x->f16_dlogit_max = sqlite3_column_double(s, 8);
        x->f16_n = sqlite3_column_int64(s, 9);
        x->compared = sqlite3_column_int(s, 10);
        x->agree = sqlite3_column_int64(s, 11);
        x->dp2_sum = sqlite3_column_double(s, 12);
        x->maxd = lab_sq_col_num(s, 13);
        x->sc0 = sc;
        if (sc + x->n_scored > r->n_scored) {
            rc = lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: run_sequences score more positions than the run",
                          st->path, (long long)r->run_id);
            break;
        }
        if (x->compared) {
            if ((rc = blob_f64(st, s, 14, d->kl + sc, x->n_scored, "run_sequences.kl", err, errlen)) ||
                (rc = blob_f64(st, s, 15, d->dp + sc, x->n_scored, "run_sequences.dp", err, errlen)) ||
                (rc = blob_f64(st, s, 16, d->dnll + sc, x->n_scored, "run_sequences.dnll", err, errlen)))
                break;
        }
        if (sqlite3_column_type(s, 17) != SQLITE_NULL) {
            double *dv = d->div_buf + q * L4;
            if ((rc = blob_f64(st, s, 17, dv, L4, "run_sequences.div", err, errlen))) break;
            x->div = dv;
        }
        sc += x->n_scored;
        q++;
    }
    if (rc) { sqlite3_finalize(s); return rc; }
    if ((rc = lab_sq_done(st, s, step, "reading run_sequences", err, errlen))) return rc;
    if (q != nseq)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: %lld of its %lld run_sequences rows", st->path,
                        (long long)r->run_id, (long long)q, (long long)nseq);
    d->n_scored = sc;
    return LAB_OK;
}

/* logits_topk (and logits_full) rows of r in sequence order. */
static int load_logits(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    d->n_pos = calloc((size_t)(d->n_seq + 1), sizeof *d->n_pos);
    d->top_k = r->top_k;
    d->n_tok = r->n_tokens;
    size_t nk = (size_t)(d->n_tok * d->top_k + 1);
    d->topk_ids = malloc(nk * sizeof *d->topk_ids);
    d->topk_lp = malloc(nk * sizeof *d->topk_lp);
    if (!d->n_pos || !d->topk_ids || !d->topk_lp) return OOM();
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ?1 ORDER BY seq", &s,
                            "reading logits_topk", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    int64_t q = 0, p = 0;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 1), k = sqlite3_column_int64(s, 2);
        size_t nb = (size_t)(np * k) * 4;
        if (q >= d->n_seq || sqlite3_column_int64(s, 0) != r->info.seq_lo + q || k != d->top_k || p + np > d->n_tok ||
            sqlite3_column_bytes(s, 3) != (int)nb || sqlite3_column_bytes(s, 4) != (int)nb) {
            sqlite3_finalize(s);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: logits_topk rows do not match the shard's sequences",
                            st->path, (long long)r->run_id);
        }
        memcpy(d->topk_ids + p * k, sqlite3_column_blob(s, 3), nb);
        memcpy(d->topk_lp + p * k, sqlite3_column_blob(s, 4), nb);
        d->n_pos[q++] = np;
        p += np;
    }
    if ((rc = lab_sq_done(st, s, step, "reading logits_topk", err, errlen))) return rc;
    if (q != d->n_seq || p != d->n_tok)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: %lld of its %lld logits_topk rows", st->path,
                        (long long)r->run_id, (long long)q, (long long)d->n_seq);
    if ((rc = lab_sq_prep_as(st, "SELECT seq, n_pos, vocab, data FROM logits_full WHERE run_id = ?1 ORDER BY seq", &s,
                             "reading logits_full", err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    q = 0;
    p = 0;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t np = sqlite3_column_int64(s, 1), V = sqlite3_column_int64(s, 2);
        if (!d->full) {
            d->vocab = V;
            if (!(d->full = malloc((size_t)(d->n_tok * V + 1) * sizeof *d->full))) { sqlite3_finalize(s); return OOM(); }
        }
        size_t nb = (size_t)(np * V) * 2;
        if (V != d->vocab || q >= d->n_seq || np != d->n_pos[q] || sqlite3_column_bytes(s, 3) != (int)nb) {
            sqlite3_finalize(s);
            return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: logits_full rows do not match the shard's sequences",
                            st->path, (long long)r->run_id);
        }
        memcpy(d->full + p * V, sqlite3_column_blob(s, 3), nb);
        p += np;
        q++;
    }
    if ((rc = lab_sq_done(st, s, step, "reading logits_full", err, errlen))) return rc;
    if (d->full && q != d->n_seq)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: %lld of its %lld logits_full rows", st->path,
                        (long long)r->run_id, (long long)q, (long long)d->n_seq);
    return LAB_OK;
}

/* probes of r, in their order. */
static int load_probes(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int64_t cap = 0;
    int step, rc = lab_sq_prep_as(st, "SELECT site, layer, dtype, src_dtype, calls, rows, bytes_per_row, src_row_bytes,"
                                      " dst_row_bytes, converting, violations, rows_unwritten, detail FROM probes"
                                      " WHERE run_id = ?1 ORDER BY idx", &s, "reading probes", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        vt_probe *p = lab_sq_append((void **)&d->probes, &d->n_probes, &cap, sizeof *p);
        if (!p) { sqlite3_finalize(s); return OOM(); }
        lab_sq_col_copy(s, 0, p->site, sizeof p->site);
        p->layer = sqlite3_column_int(s, 1);
        lab_sq_col_copy(s, 2, p->dtype, sizeof p->dtype);
        lab_sq_col_copy(s, 3, p->src_dtype, sizeof p->src_dtype);
        p->calls = sqlite3_column_int64(s, 4);
        p->rows = sqlite3_column_int64(s, 5);
        p->bytes_per_row = sqlite3_column_int64(s, 6);
        p->src_row_bytes = sqlite3_column_int64(s, 7);
        p->dst_row_bytes = sqlite3_column_int64(s, 8);
        p->converting = sqlite3_column_int(s, 9);
        p->violations = sqlite3_column_int64(s, 10);
        p->rows_unwritten = sqlite3_column_int64(s, 11);
        lab_sq_col_copy(s, 12, p->detail, sizeof p->detail);
    }
    return lab_sq_done(st, s, step, "reading probes", err, errlen);
}

/* expectations of r, in their order. */
static int load_expectations(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int64_t cap = 0;
    int step, rc = lab_sq_prep_as(st, "SELECT site, expected_dtype, seen_dtypes, records, ok, reason FROM expectations"
                                      " WHERE run_id = ?1 ORDER BY rowid", &s, "reading expectations", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        lab_expect_result *x = lab_sq_append((void **)&d->ex, &d->n_ex, &cap, sizeof *x);
        if (!x) { sqlite3_finalize(s); return OOM(); }
        lab_sq_col_copy(s, 0, x->site, sizeof x->site);
        lab_sq_col_copy(s, 1, x->expected, sizeof x->expected);
        lab_sq_col_copy(s, 2, x->seen, sizeof x->seen);
        x->records = sqlite3_column_int64(s, 3);
        x->ok = sqlite3_column_int(s, 4);
        lab_sq_col_copy(s, 5, x->reason, sizeof x->reason);
    }
    return lab_sq_done(st, s, step, "reading expectations", err, errlen);
}

/* run_knobs of r, in their order: names, values and numeric flags. */
static int load_knobs(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int64_t capn = 0, n = 0;
    int step, rc = lab_sq_prep_as(st, "SELECT name, value, numeric FROM run_knobs WHERE run_id = ?1 ORDER BY rowid", &s,
                                  "reading run_knobs", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == capn) {
            capn = capn ? 2 * capn : 16;
            char **a = realloc(d->kn, (size_t)capn * sizeof *a), **b = a ? realloc(d->kv, (size_t)capn * sizeof *b) : NULL;
            if (a) d->kn = a;
            if (b) d->kv = b;
            int *c = b ? realloc(d->knum, (size_t)capn * sizeof *c) : NULL;
            if (c) d->knum = c;
            if (!a || !b || !c) { sqlite3_finalize(s); return OOM(); }
        }
        d->kn[n] = strdup(lab_col_text(s, 0));
        d->kv[n] = strdup(lab_col_text(s, 1));
        d->knum[n] = sqlite3_column_int(s, 2);
        d->n_kn = ++n;
        if (!d->kn[n - 1] || !d->kv[n - 1]) { sqlite3_finalize(s); return OOM(); }
    }
    return lab_sq_done(st, s, step, "reading run_knobs", err, errlen);
}

/* The experiment spec of r (LAB_EINPUT when the shard lacks it). */
static int load_spec(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int step, rc = lab_sq_prep_as(st, "SELECT sha256, id, file, json FROM experiment_specs WHERE sha256 = ?1", &s,
                                  "reading experiment_specs", err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, r->experiment_sha256);
    if ((step = sqlite3_step(s)) == SQLITE_ROW) {
        d->spec_sha = dup_col(s, 0);
        d->spec_id = dup_col(s, 1);
        d->spec_file = dup_col(s, 2);
        d->spec_json = dup_col(s, 3);
        step = sqlite3_step(s);
    }
    if ((rc = lab_sq_done(st, s, step, "reading experiment_specs", err, errlen))) return rc;
    if (!d->spec_json)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: run %lld: its experiment spec %s is missing", st->path,
                        (long long)r->run_id, r->experiment_sha256 ? r->experiment_sha256 : "(none)");
    return LAB_OK;
}

/* probes, expectations, knobs and the experiment spec of r, in that order. */
static int load_records(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    int rc = load_probes(st, r, d, err, errlen);
    if (!rc) rc = load_expectations(st, r, d, err, errlen);
    if (!rc) rc = load_knobs(st, r, d, err, errlen);
    if (!rc) rc = load_spec(st, r, d, err, errlen);
    return rc;
}

int lab_store_shard_load(lab_store *st, const lab_shard_run *r, lab_shard_data *d, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    int rc = load_sequences(st, r, d, err, errlen);
    if (!rc) rc = load_logits(st, r, d, err, errlen);
    if (!rc) rc = load_records(st, r, d, err, errlen);
    if (rc) lab_shard_data_free(d);
    return rc;
}

int lab_store_put_merged_shard(lab_store *st, int64_t run_id, const lab_shard_run *r, const char *source_db,
                               char *err, size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "INSERT INTO merged_shards (run_id, shard_index, shard_count, seq_lo, seq_hi, source_db,"
                              " source_run_id, host, task, slurm_job_id, slurm_array_job_id, slurm_array_task_id,"
                              " logits_sha256, started_at, finished_at, merged_at)"
                              " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)", &s, err, errlen))) {
        lab_sq_rollback(st);
        return rc;
    }
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int64(s, 2, r->info.index);
    sqlite3_bind_int64(s, 3, r->info.count);
    sqlite3_bind_int64(s, 4, r->info.seq_lo);
    sqlite3_bind_int64(s, 5, r->info.seq_hi);
    lab_sq_bind_text(s, 6, source_db);
    sqlite3_bind_int64(s, 7, r->run_id);
    lab_sq_bind_text(s, 8, r->info.node ? r->info.node : r->host);
    lab_sq_bind_text(s, 9, r->info.task);
    lab_sq_bind_text(s, 10, r->info.slurm_job_id);
    lab_sq_bind_text(s, 11, r->info.slurm_array_job_id);
    lab_sq_bind_text(s, 12, r->info.slurm_array_task_id);
    lab_sq_bind_text(s, 13, r->logits_sha256);
    lab_sq_bind_text(s, 14, r->started_at);
    lab_sq_bind_text(s, 15, r->finished_at);
    lab_sq_bind_text(s, 16, now);
    rc = lab_sq_step(st, s, err, errlen, "store merged_shards");
    sqlite3_finalize(s);
    if (rc) { lab_sq_rollback(st); return rc; }
    return lab_sq_commit(st, err, errlen);
}

int lab_store_shard_state(lab_store *st, const char *experiment, const char *arm, const char *shard,
                          const char *code_version, int *state, char *err, size_t errlen) {
    *state = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT status, code_version FROM runs WHERE experiment = ?1 AND arm = ?2 AND shard = ?3"
                                " AND repeat_idx = 0 ORDER BY id", &s, "reading shard status", err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, experiment);
    lab_sq_bind_text(s, 2, arm);
    lab_sq_bind_text(s, 3, shard);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        const char *status = lab_col_text(s, 0);
        int same = !strcmp(lab_col_text(s, 1), code_version);
        if (!strcmp(status, "FINISHED") && same) *state = 'F';
        else if (!strcmp(status, "RUNNING") && *state != 'F') *state = 'R';
        else if (*state == 0) *state = 'X';
    }
    return lab_sq_done(st, s, step, "reading shard status", err, errlen);
}

int lab_store_spec_json(lab_store *st, const char *sha256, char **json, char *err, size_t errlen) {
    *json = NULL;
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT json FROM experiment_specs WHERE sha256 = ?1", &s, "reading experiment_specs",
                            err, errlen);
    if (rc) return rc;
    lab_sq_bind_text(s, 1, sha256);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        *json = dup_col(s, 0);
        step = sqlite3_step(s);
    }
    if ((rc = lab_sq_done(st, s, step, "reading experiment_specs", err, errlen))) { free(*json); *json = NULL; return rc; }
    if (!*json) return lab_errf(err, errlen, LAB_EINPUT, "%s: experiment spec %s is missing", st->path, sha256 ? sha256 : "");
    return LAB_OK;
}

int lab_store_logits_composed(lab_store *st, int64_t run_id, int *composed, char *err, size_t errlen) {
    *composed = 0;
    int have = 0, rc = lab_store_has_table(st, "run_sequences", &have, err, errlen);
    if (rc || !have) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep_as(st, "SELECT EXISTS (SELECT 1 FROM run_sequences WHERE run_id = ?1)", &s,
                             "reading run_sequences", err, errlen)))
        return rc;
    sqlite3_bind_int64(s, 1, run_id);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        *composed = sqlite3_column_int(s, 0);
        step = sqlite3_step(s);
    }
    return lab_sq_done(st, s, step, "reading run_sequences", err, errlen);
}

int lab_store_topk_same(lab_store *st, int64_t a, int64_t b, int *same, char *err, size_t errlen) {
    *same = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT (SELECT count(*) FROM logits_topk WHERE run_id = ?1),"
                                " (SELECT count(*) FROM logits_topk WHERE run_id = ?2),"
                                " (SELECT count(*) FROM logits_topk x JOIN logits_topk y ON y.seq = x.seq"
                                "  AND y.run_id = ?2 WHERE x.run_id = ?1 AND x.n_pos = y.n_pos AND x.k = y.k"
                                "  AND x.ids = y.ids AND x.logprobs = y.logprobs)", &s, "comparing top-k", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        int64_t na = sqlite3_column_int64(s, 0), nb = sqlite3_column_int64(s, 1), eq = sqlite3_column_int64(s, 2);
        *same = na > 0 && na == nb && eq == na;
        step = sqlite3_step(s);
    }
    return lab_sq_done(st, s, step, "comparing top-k", err, errlen);
}

/* ------------------------------------------------------------ schema and text checks */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void free_cols(char **cols, int64_t n) {
    for (int64_t i = 0; i < n; i++) free(cols[i]);
    free(cols);
}

/* Every "table.column" of st's tables (not SQLite's own), sorted. */
static int read_columns(lab_store *st, char ***cols, int64_t *n, char *err, size_t errlen) {
    *cols = NULL;
    *n = 0;
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, "SELECT m.name || '.' || p.name FROM sqlite_master m, pragma_table_info(m.name) p"
                                " WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                            &s, "reading the schema", err, errlen);
    if (rc) return rc;
    int64_t cap = 0;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        char **slot = lab_sq_append((void **)cols, n, &cap, sizeof *slot);
        if (slot && !(*slot = strdup(lab_col_text(s, 0)))) { (*n)--; slot = NULL; }
        if (!slot) { rc = OOM(); break; }
    }
    if (rc) sqlite3_finalize(s);
    else rc = lab_sq_done(st, s, step, "reading the schema", err, errlen);
    if (rc) {
        free_cols(*cols, *n);
        *cols = NULL;
        *n = 0;
        return rc;
    }
    if (*n > 1) qsort(*cols, (size_t)*n, sizeof **cols, cmp_str);
    return LAB_OK;
}

/* The columns of schema version v as the store creates them: a fresh
 * database migrated to v. It cannot be in memory (the store insists on WAL,
 * which an in-memory database has not), so it is a file in a private
 * temporary directory, removed before returning. */
static int expected_columns(int v, char ***cols, int64_t *n, char *err, size_t errlen) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200], side[4300];
    snprintf(dir, sizeof dir, "%s/vtlab-schema.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return lab_errf(err, errlen, LAB_EIO, "%s: cannot create a directory for the reference schema: %s", dir,
                        strerror(errno));
    snprintf(path, sizeof path, "%s/v%d.db", dir, v);
    lab_store *ref = NULL;
    int rc = lab_store_open_version(&ref, path, v, err, errlen);
    if (!rc) rc = read_columns(ref, cols, n, err, errlen);
    lab_store_close(ref);
    static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(side, sizeof side, "%s%s", path, sfx[i]);
        unlink(side);
    }
    rmdir(dir);
    return rc ? lab_err_prefix(err, errlen, rc, "the reference schema of version %d", v) : LAB_OK;
}

void lab_schema_cache_free(lab_schema_cache *c) {
    for (int v = 0; v <= LAB_SCHEMA_VERSION; v++) free_cols(c->cols[v], c->n[v]);
    memset(c, 0, sizeof *c);
}

/* Appends what of want (sorted) have (sorted) lacks to miss: "table T" when
 * none of T's columns is there, else "column T.C". Returns how many. */
static int64_t list_missing(char **want, int64_t nw, char **have, int64_t nh, lab_buf *miss) {
    int64_t count = 0;
    for (int64_t i = 0; i < nw; i++) {
        if (bsearch(&want[i], have, (size_t)nh, sizeof *have, cmp_str)) continue;
        size_t tl = (size_t)(strchr(want[i], '.') - want[i]);
        int table_there = 0;
        for (int64_t k = 0; k < nh && !table_there; k++) table_there = !strncmp(have[k], want[i], tl + 1);
        if (table_there) {
            lab_buf_printf(miss, "%scolumn %s", count ? ", " : "", want[i]);
        } else {
            lab_buf_printf(miss, "%stable %.*s", count ? ", " : "", (int)tl, want[i]);
            while (i + 1 < nw && !strncmp(want[i + 1], want[i], tl + 1)) i++;   /* its other columns */
        }
        count++;
    }
    return count;
}

int lab_store_check_schema(lab_store *st, lab_schema_cache *cache, char *err, size_t errlen) {
    int v = lab_store_version(st), rc;
    if (v < 1 || v > LAB_SCHEMA_VERSION)
        return lab_errf(err, errlen, LAB_EINPUT, "%s: schema version %d is not one this vtlab knows", st->path, v);
    if (!cache->cols[v] && (rc = expected_columns(v, &cache->cols[v], &cache->n[v], err, errlen))) return rc;
    char **have = NULL;
    int64_t nh = 0;
    if ((rc = read_columns(st, &have, &nh, err, errlen))) return rc;
    lab_buf miss = {0};
    int64_t nm = list_missing(cache->cols[v], cache->n[v], have, nh, &miss);
    free_cols(have, nh);
    if (miss.oom) { lab_buf_free(&miss); return OOM(); }
    if (nm)
        rc = lab_errf(err, errlen, LAB_EINPUT, "%s: its schema is not that of the version it claims (%d): it lacks %s "
                      "(the file was edited or damaged)", st->path, v, miss.data);
    lab_buf_free(&miss);
    return rc;
}

int lab_store_shard_texts(lab_store *st, const lab_shard_run *r, int (*fn)(void *ctx, const lab_shard_text *t),
                          void *ctx, char *err, size_t errlen) {
    /* one statement for all: texts only (no blob is read), in the order
     * merge copies them */
    static const char *const sql =
        "SELECT 'experiment_specs', rowid, 'id', id FROM experiment_specs WHERE sha256 = ?2"
        " UNION ALL SELECT 'experiment_specs', rowid, 'file', file FROM experiment_specs WHERE sha256 = ?2"
        " UNION ALL SELECT 'run_knobs', rowid, 'name', name FROM run_knobs WHERE run_id = ?1"
        " UNION ALL SELECT 'run_knobs', rowid, 'value', value FROM run_knobs WHERE run_id = ?1"
        " UNION ALL SELECT 'probes', idx, 'site', site FROM probes WHERE run_id = ?1"
        " UNION ALL SELECT 'probes', idx, 'dtype', dtype FROM probes WHERE run_id = ?1"
        " UNION ALL SELECT 'probes', idx, 'src_dtype', src_dtype FROM probes WHERE run_id = ?1"
        " UNION ALL SELECT 'expectations', rowid, 'site', site FROM expectations WHERE run_id = ?1"
        " UNION ALL SELECT 'expectations', rowid, 'expected_dtype', expected_dtype FROM expectations WHERE run_id = ?1"
        " UNION ALL SELECT 'run_sequences', seq, 'logits_sha256', logits_sha256 FROM run_sequences WHERE run_id = ?1";
    sqlite3_stmt *s;
    int rc = lab_sq_prep_as(st, sql, &s, "reading the shard's names", err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, r->run_id);
    lab_sq_bind_text(s, 2, r->experiment_sha256);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        lab_shard_text t = {lab_col_text(s, 0), lab_col_text(s, 2),
                            sqlite3_column_type(s, 3) == SQLITE_NULL ? NULL : (const char *)sqlite3_column_text(s, 3),
                            sqlite3_column_int64(s, 1)};
        if ((rc = fn(ctx, &t))) { sqlite3_finalize(s); return rc; }
    }
    return lab_sq_done(st, s, step, "reading the shard's names", err, errlen);
}
