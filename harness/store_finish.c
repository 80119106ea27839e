/*
 * store_finish.c — the end of a run in results.db: lab_store_finish, the one
 * transaction that writes every row a run produced (knobs, probes,
 * expectations, metrics, top-k and full logits, run_sequences, run_shards,
 * the comparison with its per-layer divergence, the verdict) and marks the
 * run FINISHED only when lab_store_run_missing (store.c) finds it complete;
 * lab_store_abort, the end of a run that failed or was killed; and
 * lab_store_put_pair_test, a McNemar test between two arms' finished runs.
 *
 * A file of its own because these writers are the whole of a run's stored
 * result (a new result column is written here and nowhere else), while
 * store.c opens databases and leases runs and knows nothing of results.
 * run_sequences and run_shards are written here with the rest; the merge
 * (store_merge.c) only reads them back, so it and store.c never need each
 * other both ways.
 */
#include <stdio.h>
#include <string.h>

#include "store_internal.h"
#include "util.h"

/* Each writer below runs inside lab_store_finish's transaction. */

static void bind_real(sqlite3_stmt *s, int i, double v) {
    if (v != v || v > 1e308 || v < -1e308) sqlite3_bind_null(s, i);
    else sqlite3_bind_double(s, i, v);
}

static void bind_f64s(sqlite3_stmt *s, int i, const double *v, int64_t n) {
    if (v && n > 0) sqlite3_bind_blob64(s, i, v, (size_t)n * sizeof *v, SQLITE_STATIC);
    else sqlite3_bind_null(s, i);
}

static int put_knobs(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO run_knobs (run_id, name, value, numeric) VALUES (?1, ?2, ?3, ?4)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_knobs; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, r->knob_names[i]);
        lab_sq_bind_text(s, 3, r->knob_values[i]);
        sqlite3_bind_int(s, 4, r->knob_numeric ? r->knob_numeric[i] : 1);
        rc = lab_sq_step(st, s, err, errlen, "store knobs");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_probes(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO probes (run_id, idx, site, layer, dtype, src_dtype, calls, rows,"
                      " bytes_per_row, src_row_bytes, dst_row_bytes, converting, violations, rows_unwritten,"
                      " detail, ok) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_probes; i++) {
        const vt_probe *p = &r->probes[i];
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, i);
        sqlite3_bind_text(s, 3, p->site, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 4, p->layer);
        sqlite3_bind_text(s, 5, p->dtype, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(s, 6, p->src_dtype, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(s, 7, p->calls);
        sqlite3_bind_int64(s, 8, p->rows);
        sqlite3_bind_int64(s, 9, p->bytes_per_row);
        sqlite3_bind_int64(s, 10, p->src_row_bytes);
        sqlite3_bind_int64(s, 11, p->dst_row_bytes);
        sqlite3_bind_int(s, 12, p->converting);
        sqlite3_bind_int64(s, 13, p->violations);
        sqlite3_bind_int64(s, 14, p->rows_unwritten);
        sqlite3_bind_text(s, 15, p->detail, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(s, 16, r->probe_ok[i]);
        rc = lab_sq_step(st, s, err, errlen, "store probes");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_expect(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO expectations (run_id, site, expected_dtype, seen_dtypes, records, ok, reason)"
                      " VALUES (?1,?2,?3,?4,?5,?6,?7)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_expect; i++) {
        const lab_expect_result *x = &r->expect[i];
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, x->site);
        lab_sq_bind_text(s, 3, x->expected);
        lab_sq_bind_text(s, 4, x->seen);
        sqlite3_bind_int64(s, 5, x->records);
        sqlite3_bind_int(s, 6, x->ok);
        lab_sq_bind_text(s, 7, x->reason);
        rc = lab_sq_step(st, s, err, errlen, "store expectations");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_metrics(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO metrics (run_id, name, value) VALUES (?1, ?2, ?3)", &s, err, errlen);
    for (int64_t i = 0; !rc && i < r->n_metrics; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        lab_sq_bind_text(s, 2, r->metric_names[i]);
        /* NaN/inf are not SQL values: stored as NULL ("not measurable"). */
        double v = r->metric_values[i];
        if (v != v || v > 1e308 || v < -1e308) sqlite3_bind_null(s, 3);
        else sqlite3_bind_double(s, 3, v);
        rc = lab_sq_step(st, s, err, errlen, "store metrics");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_logits(lab_store *st, int64_t run, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO logits_topk (run_id, seq, n_pos, k, ids, logprobs) VALUES (?1,?2,?3,?4,?5,?6)",
                  &s, err, errlen);
    /* Blobs are little-endian int32 / f32, the byte order of every machine
     * vtlab builds on (x86-64, aarch64); docs/schema.md states it. */
    for (int64_t q = 0; !rc && r->topk_ids && q < r->n_sequences; q++) {
        int64_t p0 = r->offsets[q], np = r->offsets[q + 1] - p0;
        size_t nb = (size_t)(np * r->top_k) * sizeof(int32_t);
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, r->seq_base + q);
        sqlite3_bind_int64(s, 3, np);
        sqlite3_bind_int64(s, 4, r->top_k);
        sqlite3_bind_blob64(s, 5, r->topk_ids + p0 * r->top_k, nb, SQLITE_STATIC);
        sqlite3_bind_blob64(s, 6, r->topk_logprobs + p0 * r->top_k, nb, SQLITE_STATIC);
        rc = lab_sq_step(st, s, err, errlen, "store top-k logits");
    }
    sqlite3_finalize(s);
    if (rc || !r->full_f16) return rc;
    if ((rc = lab_sq_prep(st, "INSERT INTO logits_full (run_id, seq, n_pos, vocab, dtype, data) VALUES (?1,?2,?3,?4,'f16',?5)",
                   &s, err, errlen))) return rc;
    for (int64_t q = 0; !rc && q < r->n_sequences; q++) {
        int64_t p0 = r->offsets[q], np = r->offsets[q + 1] - p0;
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, r->seq_base + q);
        sqlite3_bind_int64(s, 3, np);
        sqlite3_bind_int64(s, 4, r->vocab);
        sqlite3_bind_blob64(s, 5, r->full_f16 + p0 * r->vocab, (size_t)(np * r->vocab) * sizeof(uint16_t), SQLITE_STATIC);
        rc = lab_sq_step(st, s, err, errlen, "store full logits");
    }
    sqlite3_finalize(s);
    return rc;
}

/* The run's run_sequences rows (r->seq, with seq numbers from r->seq_base):
 * what a merge of shards recomputes the run from. */
static int put_sequences(lab_store *st, int64_t run_id, const lab_run_result *r, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO run_sequences (run_id, seq, n_pos, n_scored, logits_sha256, nll_sum, nll_n,"
                             " f16_kl_sum, f16_kl_max, f16_dlogit_max, f16_n, compared, agree, dp2_sum, maxd, kl, dp,"
                             " dnll, div) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19)",
                         &s, err, errlen);
    for (int64_t q = 0; !rc && q < r->n_sequences; q++) {
        const lab_seq_stat *x = &r->seq[q];
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        sqlite3_bind_int64(s, 1, run_id);
        sqlite3_bind_int64(s, 2, r->seq_base + q);
        sqlite3_bind_int64(s, 3, x->n_pos);
        sqlite3_bind_int64(s, 4, x->n_scored);
        sqlite3_bind_text(s, 5, x->logits_sha256, -1, SQLITE_TRANSIENT);
        bind_real(s, 6, x->nll_sum);
        sqlite3_bind_int64(s, 7, x->nll_n);
        bind_real(s, 8, x->f16_kl_sum);
        bind_real(s, 9, x->f16_kl_max);
        bind_real(s, 10, x->f16_dlogit_max);
        sqlite3_bind_int64(s, 11, x->f16_n);
        sqlite3_bind_int(s, 12, x->compared);
        if (x->compared) {
            sqlite3_bind_int64(s, 13, x->agree);
            bind_real(s, 14, x->dp2_sum);
            bind_real(s, 15, x->maxd);   /* NaN -> NULL: "a NaN was met" */
            bind_f64s(s, 16, r->seq_kl ? r->seq_kl + x->sc0 : NULL, x->n_scored);
            bind_f64s(s, 17, r->seq_dp ? r->seq_dp + x->sc0 : NULL, x->n_scored);
            bind_f64s(s, 18, r->seq_dnll ? r->seq_dnll + x->sc0 : NULL, x->n_scored);
        }
        bind_f64s(s, 19, x->div, r->n_layers * 4);
        rc = lab_sq_step(st, s, err, errlen, "store run_sequences");
    }
    sqlite3_finalize(s);
    return rc;
}

/* A shard run's run_shards row: what the merge checks and needs besides. */
static int put_shard(lab_store *st, int64_t run_id, const lab_shard_info *h, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO run_shards (run_id, shard_index, shard_count, seq_lo, seq_hi, n_seq_total,"
                             " n_tokens_total, n_scored_total, metrics, div_sequences, div_tolerance, decision_metric,"
                             " decision_threshold, decision_ge, n_layers, probes_lost, task, node, slurm_job_id,"
                             " slurm_array_job_id, slurm_array_task_id) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                             "?12,?13,?14,?15,?16,?17,?18,?19,?20,?21)", &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int64(s, 2, h->index);
    sqlite3_bind_int64(s, 3, h->count);
    sqlite3_bind_int64(s, 4, h->seq_lo);
    sqlite3_bind_int64(s, 5, h->seq_hi);
    sqlite3_bind_int64(s, 6, h->n_seq_total);
    sqlite3_bind_int64(s, 7, h->n_tokens_total);
    sqlite3_bind_int64(s, 8, h->n_scored_total);
    sqlite3_bind_int64(s, 9, h->metrics);
    sqlite3_bind_int64(s, 10, h->div_sequences);
    sqlite3_bind_double(s, 11, h->div_tolerance);
    if (h->has_decision) {
        lab_sq_bind_text(s, 12, h->decision_metric);
        sqlite3_bind_double(s, 13, h->decision_threshold);
        sqlite3_bind_int(s, 14, h->decision_ge);
    }
    sqlite3_bind_int64(s, 15, h->n_layers);
    sqlite3_bind_int64(s, 16, h->probes_lost);
    lab_sq_bind_text(s, 17, h->task);
    lab_sq_bind_text(s, 18, h->node);
    lab_sq_bind_text(s, 19, h->slurm_job_id);
    lab_sq_bind_text(s, 20, h->slurm_array_job_id);
    lab_sq_bind_text(s, 21, h->slurm_array_task_id);
    rc = lab_sq_step(st, s, err, errlen, "store run_shards");
    sqlite3_finalize(s);
    return rc;
}

static int put_comparison(lab_store *st, int64_t run, const lab_comparison *c, char *err, size_t errlen) {
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO comparisons (run_id, reference_run_id, reference_recomputed, reference_hash_match,"
                      " n_scored, top1_k, top1_n, top1_lo, top1_hi, kl_mean, kl_p99, kl_max, max_abs_dlogit, rms_dp,"
                      " mcnemar_b, mcnemar_c, mcnemar_p, div_sequences, div_tolerance, first_div_layer,"
                      " first_div_site, first_div_value)"
                      " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22)",
                  &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_int64(s, 2, c->reference_run_id);
    sqlite3_bind_int(s, 3, c->reference_recomputed);
    if (c->reference_hash_match < 0) sqlite3_bind_null(s, 4);
    else sqlite3_bind_int(s, 4, c->reference_hash_match);
    sqlite3_bind_int64(s, 5, c->n_scored);
    sqlite3_bind_int64(s, 6, c->top1_k);
    sqlite3_bind_int64(s, 7, c->top1_n);
    bind_real(s, 8, c->top1_lo);
    bind_real(s, 9, c->top1_hi);
    bind_real(s, 10, c->kl_mean);
    bind_real(s, 11, c->kl_p99);
    bind_real(s, 12, c->kl_max);
    bind_real(s, 13, c->max_abs_dlogit);
    bind_real(s, 14, c->rms_dp);
    sqlite3_bind_int64(s, 15, c->mcnemar_b);
    sqlite3_bind_int64(s, 16, c->mcnemar_c);
    bind_real(s, 17, c->mcnemar_p);
    sqlite3_bind_int64(s, 18, c->div_sequences);
    if (c->div_sequences > 0) {
        bind_real(s, 19, c->div_tolerance);
        if (c->first_div_layer >= 0) {
            sqlite3_bind_int64(s, 20, c->first_div_layer);
            sqlite3_bind_int(s, 21, c->first_div_site);
            bind_real(s, 22, c->first_div_value);
        }
    }
    rc = lab_sq_step(st, s, err, errlen, "store comparison");
    sqlite3_finalize(s);
    if (rc || c->n_div == 0) return rc;
    if ((rc = lab_sq_prep(st, "INSERT INTO layer_divergence (run_id, reference_run_id, layer, site, rel_l2)"
                       " VALUES (?1,?2,?3,?4,?5)", &s, err, errlen))) return rc;
    for (int64_t i = 0; !rc && i < c->n_div; i++) {
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_int64(s, 2, c->reference_run_id);
        sqlite3_bind_int64(s, 3, c->div_layer[i]);
        sqlite3_bind_int(s, 4, c->div_site[i]);
        /* +inf (reference all zero, arm not) is stored as a huge finite value. */
        double v = c->div_value[i];
        sqlite3_bind_double(s, 5, v != v ? 1e308 : v > 1e308 ? 1e308 : v);
        rc = lab_sq_step(st, s, err, errlen, "store layer divergence");
    }
    sqlite3_finalize(s);
    return rc;
}

static int put_verdict(lab_store *st, int64_t run, int64_t ref, const lab_verdict_row *v, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    sqlite3_stmt *s;
    int rc = lab_sq_prep(st, "INSERT INTO verdicts (run_id, reference_run_id, metric, threshold, direction, k, n, value,"
                      " lo, hi, interval, verdict, decided_at) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,'wilson95',?11,?12)",
                  &s, err, errlen);
    if (rc) return rc;
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_int64(s, 2, ref);
    lab_sq_bind_text(s, 3, v->metric);
    sqlite3_bind_double(s, 4, v->threshold);
    lab_sq_bind_text(s, 5, v->direction_ge ? ">=" : "<=");
    sqlite3_bind_int64(s, 6, v->k);
    sqlite3_bind_int64(s, 7, v->n);
    sqlite3_bind_double(s, 8, v->value);
    sqlite3_bind_double(s, 9, v->lo);
    sqlite3_bind_double(s, 10, v->hi);
    lab_sq_bind_text(s, 11, v->verdict);
    lab_sq_bind_text(s, 12, now);
    rc = lab_sq_step(st, s, err, errlen, "store verdict");
    sqlite3_finalize(s);
    return rc;
}

int lab_store_finish(lab_store *st, int64_t run_id, const lab_run_result *r, char *err, size_t errlen) {
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = NULL;
    /* The lease must still be ours: a RUNNING row. If another process judged
     * us dead and marked it KILLED, our results are not written under it. */
    if ((rc = lab_sq_prep(st, "SELECT status FROM runs WHERE id = ?1", &s, err, errlen))) goto fail;
    sqlite3_bind_int64(s, 1, run_id);
    if (sqlite3_step(s) != SQLITE_ROW || strcmp((const char *)sqlite3_column_text(s, 0), "RUNNING")) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld is no longer RUNNING (leased by another process?)",
                      st->path, (long long)run_id);
        goto fail;
    }
    sqlite3_finalize(s);
    s = NULL;
    if ((rc = put_knobs(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_probes(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_expect(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_metrics(st, run_id, r, err, errlen))) goto fail;
    if ((rc = put_logits(st, run_id, r, err, errlen))) goto fail;
    if (r->seq && (rc = put_sequences(st, run_id, r, err, errlen))) goto fail;
    if (r->shard && (rc = put_shard(st, run_id, r->shard, err, errlen))) goto fail;
    if (r->cmp && (rc = put_comparison(st, run_id, r->cmp, err, errlen))) goto fail;
    if (r->cmp && r->verdict && (rc = put_verdict(st, run_id, r->cmp->reference_run_id, r->verdict, err, errlen)))
        goto fail;
    char now[32];
    lab_now_iso(now);
    if ((rc = lab_sq_prep(st, "UPDATE runs SET status = ?11, finished_at = ?2, n_sequences = ?3, n_tokens = ?4,"
                       " n_scored = ?5, wall_s = ?6, forward_s = ?7, logits_sha256 = ?8, assertions_ok = ?9,"
                       " assertion_reason = ?10 WHERE id = ?1", &s, err, errlen))) goto fail;
    lab_sq_bind_text(s, 11, r->partial ? "PARTIAL" : "FINISHED");
    sqlite3_bind_int64(s, 1, run_id);
    lab_sq_bind_text(s, 2, now);
    sqlite3_bind_int64(s, 3, r->n_sequences);
    sqlite3_bind_int64(s, 4, r->n_tokens);
    sqlite3_bind_int64(s, 5, r->n_scored);
    sqlite3_bind_double(s, 6, r->wall_s);
    sqlite3_bind_double(s, 7, r->forward_s);
    lab_sq_bind_text(s, 8, r->logits_sha256[0] ? r->logits_sha256 : NULL);   /* NULL: no logits (a benchmark run) */
    if (r->assertions_ok < 0) sqlite3_bind_null(s, 9);   /* nothing was asserted (a benchmark run) */
    else sqlite3_bind_int(s, 9, r->assertions_ok);
    lab_sq_bind_text(s, 10, r->assertion_reason);
    if ((rc = lab_sq_step(st, s, err, errlen, "finish run"))) goto fail;
    sqlite3_finalize(s);
    s = NULL;
    /* FINISHED means complete: checked here, on the rows now in the
     * transaction, so no caller can mark a run FINISHED without them (a
     * reference repeat finished before the reference it compares with was). */
#ifndef VT_MUTATE_NO_FINISH_CHECK
    char what[256];
    if ((rc = lab_store_run_missing(st, run_id, what, sizeof what, err, errlen))) goto fail;
    if (what[0]) {
        rc = lab_errf(err, errlen, LAB_EINTERNAL, "%s: run %lld lacks %s: not marked FINISHED", st->path,
                      (long long)run_id, what);
        goto fail;
    }
#endif
    if ((rc = lab_sq_commit(st, err, errlen))) goto fail;
    return LAB_OK;
fail:
    sqlite3_finalize(s);
    lab_sq_rollback(st);
    return rc;
}

int lab_store_abort(lab_store *st, int64_t run_id, const char *status, const char *error, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "UPDATE runs SET status = ?2, error = ?3, finished_at = ?4 WHERE id = ?1 AND status = 'RUNNING'",
                   &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    sqlite3_bind_int64(s, 1, run_id);
    lab_sq_bind_text(s, 2, status);
    lab_sq_bind_text(s, 3, error);
    lab_sq_bind_text(s, 4, now);
    rc = lab_sq_step(st, s, err, errlen, "abort run");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}

int lab_store_put_pair_test(lab_store *st, int64_t run_a, int64_t run_b, int64_t ref_run,
                            int64_t n, int64_t b, int64_t c, double p, char *err, size_t errlen) {
    char now[32];
    lab_now_iso(now);
    int rc = lab_sq_begin(st, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s;
    if ((rc = lab_sq_prep(st, "INSERT OR REPLACE INTO pair_tests (run_a, run_b, reference_run_id, n, b, c, p, computed_at)"
                       " VALUES (?1,?2,?3,?4,?5,?6,?7,?8)", &s, err, errlen))) { lab_sq_rollback(st); return rc; }
    sqlite3_bind_int64(s, 1, run_a);
    sqlite3_bind_int64(s, 2, run_b);
    sqlite3_bind_int64(s, 3, ref_run);
    sqlite3_bind_int64(s, 4, n);
    sqlite3_bind_int64(s, 5, b);
    sqlite3_bind_int64(s, 6, c);
    sqlite3_bind_double(s, 7, p);
    lab_sq_bind_text(s, 8, now);
    rc = lab_sq_step(st, s, err, errlen, "store pair test");
    sqlite3_finalize(s);
    if (!rc) rc = lab_sq_commit(st, err, errlen);
    if (rc) lab_sq_rollback(st);
    return rc;
}
