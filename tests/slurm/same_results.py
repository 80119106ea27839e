#!/usr/bin/env python3
"""same_results.py A.db B.db [EXPERIMENT] — do two results databases hold the same runs
(of EXPERIMENT only, when given)?

Every FINISHED whole run (shard '') is keyed by (experiment, arm, repeat) and
compared field by field: status, assertions, logits hash, sizes; its
comparison (k/n, interval, KL, |dlogit|, rms dp, McNemar, divergence), its
verdict, every metric but tokens_per_s, per-layer divergence, probes,
expectations, knobs, top-k blobs, per-sequence rows, and the pair tests.
Times, ids, hosts and pids are left out. Prints one line per difference and
"same: N runs" or exits 1.
"""
import sqlite3, sys

def rows(db, sql, *a):
    return db.execute(sql, a).fetchall()

ONLY = sys.argv[3] if len(sys.argv) > 3 else None

def runs(db):
    out = {}
    for r in rows(db, "SELECT id, experiment, arm, repeat_idx, status, assertions_ok, assertion_reason,"
                      " logits_sha256, n_sequences, n_tokens, n_scored, is_reference, knob_hash, model_sha256,"
                      " dataset_sha256, code_version, score, top_k, expected_assertions FROM runs"
                      " WHERE status = 'FINISHED' AND shard = ''"):
        if ONLY is None or r[1] == ONLY:
            out[(r[1], r[2], r[3])] = r
    return out

def content(db, rid, ids):
    c = {}
    c["cmp"] = rows(db, "SELECT n_scored, top1_k, top1_n, top1_lo, top1_hi, kl_mean, kl_p99, kl_max, max_abs_dlogit,"
                        " rms_dp, mcnemar_b, mcnemar_c, mcnemar_p, div_sequences, div_tolerance, first_div_layer,"
                        " first_div_site, first_div_value FROM comparisons WHERE run_id = ?", rid)
    c["verdict"] = rows(db, "SELECT metric, threshold, direction, k, n, value, lo, hi, interval, verdict FROM verdicts"
                            " WHERE run_id = ?", rid)
    c["metrics"] = rows(db, "SELECT name, value FROM metrics WHERE run_id = ? AND name != 'tokens_per_s'"
                            " ORDER BY name", rid)
    c["div"] = rows(db, "SELECT layer, site, rel_l2 FROM layer_divergence WHERE run_id = ? ORDER BY layer, site", rid)
    c["probes"] = rows(db, "SELECT idx, site, layer, dtype, src_dtype, calls, rows, bytes_per_row, src_row_bytes,"
                           " dst_row_bytes, converting, violations, rows_unwritten, detail, ok FROM probes"
                           " WHERE run_id = ? ORDER BY idx", rid)
    c["expect"] = rows(db, "SELECT site, expected_dtype, seen_dtypes, records, ok, reason FROM expectations"
                           " WHERE run_id = ? ORDER BY site", rid)
    c["knobs"] = rows(db, "SELECT name, value, numeric FROM run_knobs WHERE run_id = ? ORDER BY name", rid)
    c["topk"] = rows(db, "SELECT seq, n_pos, k, ids, logprobs FROM logits_topk WHERE run_id = ? ORDER BY seq", rid)
    c["full"] = rows(db, "SELECT seq, n_pos, vocab, data FROM logits_full WHERE run_id = ? ORDER BY seq", rid)
    c["seqs"] = rows(db, "SELECT seq, n_pos, n_scored, logits_sha256, nll_sum, nll_n, f16_kl_sum, f16_kl_max,"
                         " f16_dlogit_max, f16_n, compared, agree, dp2_sum, maxd, kl, dp, dnll, div FROM run_sequences"
                         " WHERE run_id = ? ORDER BY seq", rid)
    c["pairs"] = sorted((ids[a], ids[b], n, bb, cc, p) for a, b, n, bb, cc, p in
                        rows(db, "SELECT run_a, run_b, n, b, c, p FROM pair_tests WHERE run_a = ?", rid))
    return c

def main():
    a, b = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
    ra, rb = runs(a), runs(b)
    bad = 0
    if set(ra) != set(rb):
        print("runs differ:", sorted(set(ra) ^ set(rb)))
        bad += 1
    ida = {r[0]: k for k, r in ra.items()}
    idb = {r[0]: k for k, r in rb.items()}
    for k in sorted(set(ra) & set(rb)):
        if ra[k][4:] != rb[k][4:]:
            print(k, "runs row differs:", ra[k][4:], rb[k][4:])
            bad += 1
        ca, cb = content(a, ra[k][0], ida), content(b, rb[k][0], idb)
        for f in ca:
            if ca[f] != cb[f]:
                print(k, f, "differs:", str(ca[f])[:300], "|", str(cb[f])[:300])
                bad += 1
    if bad:
        sys.exit(1)
    print("same: %d runs" % len(ra))

main()
