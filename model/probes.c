/*
 * probes.c — runtime dtype assertions.
 *
 * A probe records what really happened at a named site: which dtype the
 * buffer had, how many bytes per row a copy moved, and how many bytes a row of
 * its source and destination holds. The invariant of a copy that is not an
 * explicit conversion: bytes copied == source row bytes == destination row
 * bytes, and (in audit mode) no destination row left unwritten. A violation is
 * recorded with the numbers in words; it never stops the run, because the
 * point is to finish and say so.
 *
 * Records are aggregated per (site, layer, dtypes, byte counts) so that a run
 * over many sequences yields tens of records, not tens of thousands.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define VTPROBE_IMPLEMENTATION
#include "vtprobe.h"

/* The aggregation and the copy invariant are vtprobe.h's (one definition
 * for this model and every engine speaking the protocol); the session's
 * set records only when VT_PROBE is on. */
void vt_probe_copy(vt_session *s, const char *site, int layer, const vt_copy_stats *st,
                   int converting, int64_t rows_unwritten) {
    if (s->k.probe == VT_PROBE_OFF) return;
    s->probes.mode = s->k.probe == VT_PROBE_AUDIT ? VTP_AUDIT : VTP_ON;
    vtp_probe_copy(&s->probes, site, layer, vt_dtype_name(st->src_dtype), vt_dtype_name(st->dst_dtype),
                   (int64_t)st->rows, (int64_t)st->bytes_per_row, (int64_t)st->src_row_bytes,
                   (int64_t)st->dst_row_bytes, converting, rows_unwritten);
}

void vt_probe_buffer(vt_session *s, const char *site, int layer, vt_dtype dtype, int64_t rows, int64_t ncols) {
    if (s->k.probe == VT_PROBE_OFF) return;
    s->probes.mode = s->k.probe == VT_PROBE_AUDIT ? VTP_AUDIT : VTP_ON;
    vtp_probe_buffer(&s->probes, site, layer, vt_dtype_name(dtype), rows, (int64_t)vt_row_size(dtype, ncols));
}

/* One call per sequence of the pass: a pack of n sequences is n calls with
 * each one's rows, exactly the records of n forwards (the harness compares
 * runs' records, and an engine serving one sequence per request must give
 * the same). */
void vt_probe_buffer_seqs(vt_session *s, const char *site, int layer, vt_dtype dtype, int64_t T,
                          int64_t rows_per_token, int64_t ncols) {
    if (s->k.probe == VT_PROBE_OFF) return;
    for (int64_t i = 0; i < vt_seg_count(s); i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        vt_probe_buffer(s, site, layer, dtype, (r1 - r0) * rows_per_token, ncols);
    }
}

void vt_probe_copy_seqs(vt_session *s, const char *site, int layer, vt_copy_stats st, int converting, int64_t T,
                        int64_t rows_per_token, const int64_t *unwritten) {
    if (s->k.probe == VT_PROBE_OFF) return;
    for (int64_t i = 0; i < vt_seg_count(s); i++) {
        int64_t r0, r1;
        vt_seg_rows(s, T, i, &r0, &r1);
        st.rows = (r1 - r0) * rows_per_token;
        vt_probe_copy(s, site, layer, &st, converting, unwritten ? unwritten[i] : -1);
    }
}

/* Every site the model records; the ledger's defect records and the
 * experiments' `expect` entries are checked against this list. */
static const char *const SITES[] = {"residual.stream", "kda.state", "moe.gather", "moe.expert.y",
                                    "moe.scatter", "moe.combine", "logits"};

int vt_probe_site_count(void) { return (int)(sizeof SITES / sizeof SITES[0]); }
const char *vt_probe_site_at(int i) { return i >= 0 && i < vt_probe_site_count() ? SITES[i] : NULL; }

int vt_probe_site_known(const char *site) {
    for (int i = 0; i < vt_probe_site_count(); i++)
        if (!strcmp(SITES[i], site)) return 1;
    return 0;
}

int64_t vt_session_probe_count(const vt_session *s) { return s->probes.n; }

const vt_probe *vt_session_probe_at(const vt_session *s, int64_t i) {
    return i >= 0 && i < s->probes.n ? &s->probes.recs[i] : NULL;
}

void vt_session_probes_clear(vt_session *s) { vtp_probes_clear(&s->probes); }

int64_t vt_session_probes_lost(const vt_session *s) { return s->probes.lost; }
