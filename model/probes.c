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

static vt_probe *find_or_add(vt_session *s, const char *site, int layer, vt_dtype dtype, const char *src,
                             int64_t bpr, int64_t srb, int64_t drb, int converting) {
    for (int64_t i = 0; i < s->nprobes; i++) {
        vt_probe *p = &s->probes[i];
        if (p->layer == layer && !strcmp(p->site, site) && !strcmp(p->dtype, vt_dtype_name(dtype)) &&
            !strcmp(p->src_dtype, src) && p->bytes_per_row == bpr && p->src_row_bytes == srb &&
            p->dst_row_bytes == drb && p->converting == converting)
            return p;
    }
    if (s->nprobes == s->capprobes) {
        int64_t cap = s->capprobes ? s->capprobes * 2 : 64;
        vt_probe *np = realloc(s->probes, (size_t)cap * sizeof *np);
#ifndef VT_MUTATE_PROBE_LOST_UNCOUNTED   /* make mutation: a lost record goes uncounted; test_oom must fail */
        if (!np) { s->probes_lost++; return NULL; }   /* counted: the run cannot pass its assertions */
#else
        if (!np) return NULL;
#endif
        s->probes = np;
        s->capprobes = cap;
    }
    vt_probe *p = &s->probes[s->nprobes++];
    memset(p, 0, sizeof *p);
    snprintf(p->site, sizeof p->site, "%s", site);
    p->layer = layer;
    snprintf(p->dtype, sizeof p->dtype, "%s", vt_dtype_name(dtype));
    snprintf(p->src_dtype, sizeof p->src_dtype, "%s", src);
    p->bytes_per_row = bpr;
    p->src_row_bytes = srb;
    p->dst_row_bytes = drb;
    p->converting = converting;
    p->rows_unwritten = -1;
    return p;
}

void vt_probe_copy(vt_session *s, const char *site, int layer, const vt_copy_stats *st,
                   int converting, int64_t rows_unwritten) {
    if (s->k.probe == VT_PROBE_OFF) return;
    vt_probe *p = find_or_add(s, site, layer, st->dst_dtype, vt_dtype_name(st->src_dtype),
                              (int64_t)st->bytes_per_row, (int64_t)st->src_row_bytes,
                              (int64_t)st->dst_row_bytes, converting);
    if (!p) return;
    p->calls++;
    p->rows += st->rows;
    int bad_bytes = converting ? st->bytes_per_row != st->dst_row_bytes
                               : (st->bytes_per_row != st->src_row_bytes || st->bytes_per_row != st->dst_row_bytes);
    if (rows_unwritten >= 0) p->rows_unwritten = (p->rows_unwritten < 0 ? 0 : p->rows_unwritten) + rows_unwritten;
    if (bad_bytes || rows_unwritten > 0) {
        p->violations++;
        if (!p->detail[0]) {
            if (bad_bytes)
                snprintf(p->detail, sizeof p->detail,
                         "copied %zu bytes per row; source row is %zu bytes (%s), destination row %zu bytes (%s)%s",
                         st->bytes_per_row, st->src_row_bytes, vt_dtype_name(st->src_dtype), st->dst_row_bytes,
                         vt_dtype_name(st->dst_dtype),
                         rows_unwritten > 0 ? "; destination rows left unwritten" : "");
            else
                snprintf(p->detail, sizeof p->detail, "%lld destination rows left unwritten",
                         (long long)rows_unwritten);
        }
    }
}

void vt_probe_buffer(vt_session *s, const char *site, int layer, vt_dtype dtype, int64_t rows, int64_t ncols) {
    if (s->k.probe == VT_PROBE_OFF) return;
    int64_t rb = (int64_t)vt_row_size(dtype, ncols);
    vt_probe *p = find_or_add(s, site, layer, dtype, "", rb, rb, rb, 0);
    if (!p) return;
    p->calls++;
    p->rows += rows;
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

int64_t vt_session_probe_count(const vt_session *s) { return s->nprobes; }

const vt_probe *vt_session_probe_at(const vt_session *s, int64_t i) {
    return i >= 0 && i < s->nprobes ? &s->probes[i] : NULL;
}

void vt_session_probes_clear(vt_session *s) { s->nprobes = 0; s->probes_lost = 0; }

int64_t vt_session_probes_lost(const vt_session *s) { return s->probes_lost; }
