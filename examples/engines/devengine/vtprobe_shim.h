// vtprobe_shim.h — TEMPORARY stand-in for model/vtprobe.h (the planned API), used only
// until the real single-header library lands on main. Same function names and structs.
#pragma once

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <vector>
#include <algorithm>

#include "json.h"

#define VTP_PROTOCOL 1

typedef struct vtp_record {
    char site[32]; int layer; char dtype[8]; char src_dtype[8];
    int64_t calls, rows, bytes_per_row, src_row_bytes, dst_row_bytes; int converting;
    int64_t violations, rows_unwritten; char detail[192];
} vtp_record;
typedef struct vtp_probes { vtp_record *recs; int64_t n, cap, lost; int mode; } vtp_probes;
typedef struct vtp_knob { const char *name, *type, *values, *def; int numeric; const char *value; int read; } vtp_knob;
typedef struct vtp_fault { const char *name, *knob, *site, *description; } vtp_fault;
typedef struct vtp_hello {
    const char *engine, *version, *commit, *model_sha256; int64_t vocab, hidden, n_layers; const char *layer_kinds;
    const vtp_knob *knobs; int n_knobs; const char *const *probe_sites; int n_probe_sites;
    const vtp_fault *faults; int n_faults; int deterministic, capture;
} vtp_hello;
typedef int (*vtp_forward_fn)(void *user, const int32_t *tokens, int64_t T, float *logits, float *residuals,
                              vtp_probes *probes, char *err, size_t errlen);

static inline int vtp_probe_mode_env(void) {
    const char *v = getenv("VTP_PROBE");
    if (!v || !*v || !strcmp(v, "off")) return 0;
    if (!strcmp(v, "audit")) return 2;
    return 1;
}

static inline vtp_record *vtp__slot(vtp_probes *p, const char *site, int layer, const char *dtype, const char *src,
                                    int64_t bpr, int64_t srb, int64_t drb, int conv) {
    for (int64_t i = 0; i < p->n; i++) {
        vtp_record *r = &p->recs[i];
        if (!strcmp(r->site, site) && r->layer == layer && !strcmp(r->dtype, dtype) && !strcmp(r->src_dtype, src) &&
            r->bytes_per_row == bpr && r->src_row_bytes == srb && r->dst_row_bytes == drb && r->converting == conv)
            return r;
    }
    if (p->n == p->cap) {
        int64_t nc = p->cap ? p->cap * 2 : 64;
        vtp_record *nr = (vtp_record *)realloc(p->recs, (size_t)nc * sizeof *nr);
        if (!nr) { p->lost++; return NULL; }
        p->recs = nr; p->cap = nc;
    }
    vtp_record *r = &p->recs[p->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->site, sizeof r->site, "%s", site); r->layer = layer;
    snprintf(r->dtype, sizeof r->dtype, "%s", dtype); snprintf(r->src_dtype, sizeof r->src_dtype, "%s", src);
    r->bytes_per_row = bpr; r->src_row_bytes = srb; r->dst_row_bytes = drb; r->converting = conv;
    r->rows_unwritten = -1;
    return r;
}

static inline void vtp_probe_buffer(vtp_probes *p, const char *site, int layer, const char *dtype, int64_t rows,
                                    int64_t row_bytes) {
    if (!p || !p->mode) return;
    vtp_record *r = vtp__slot(p, site, layer, dtype, "", row_bytes, row_bytes, row_bytes, 0);
    if (!r) return;
    r->calls++; r->rows += rows;
}

static inline void vtp_probe_copy(vtp_probes *p, const char *site, int layer, const char *src_dtype,
                                  const char *dst_dtype, int64_t rows, int64_t bpr, int64_t srb, int64_t drb,
                                  int converting, int64_t unwritten) {
    if (!p || !p->mode) return;
    vtp_record *r = vtp__slot(p, site, layer, dst_dtype, src_dtype, bpr, srb, drb, converting);
    if (!r) return;
    r->calls++; r->rows += rows;
    int bad = converting ? bpr != drb : (bpr != srb || bpr != drb);
    if (unwritten >= 0) { r->rows_unwritten = (r->rows_unwritten < 0 ? 0 : r->rows_unwritten) + unwritten; }
    if (bad || unwritten > 0) {
        r->violations++;
        if (!r->detail[0]) {
            if (bad) snprintf(r->detail, sizeof r->detail, "copied %" PRId64 " bytes per row; source row is %" PRId64
                              " bytes (%s), destination row %" PRId64 " bytes (%s)", bpr, srb, src_dtype, drb, dst_dtype);
            else snprintf(r->detail, sizeof r->detail, "%" PRId64 " destination rows left unwritten", unwritten);
        }
    }
}

static inline size_t vtp__esize(const char *dt) {
    if (!strcmp(dt, "f32") || !strcmp(dt, "i32")) return 4;
    if (!strcmp(dt, "bf16") || !strcmp(dt, "f16")) return 2;
    return 1;
}
static inline void vtp__pat(const char *dt, unsigned char *pat, size_t *es) {
    *es = vtp__esize(dt);
    if (!strcmp(dt, "f32")) { uint32_t v = 0x7FA5A5A5u; memcpy(pat, &v, 4); }
    else if (!strcmp(dt, "bf16")) { uint16_t v = 0x7FA5; memcpy(pat, &v, 2); }
    else if (!strcmp(dt, "f16")) { uint16_t v = 0x7DA5; memcpy(pat, &v, 2); }
    else memset(pat, 0xA5, *es);
}
static inline void vtp_sentinel_fill(void *buf, const char *dtype, int64_t rows, int64_t row_bytes) {
    unsigned char pat[8]; size_t es; vtp__pat(dtype, pat, &es);
    unsigned char *b = (unsigned char *)buf;
    for (int64_t off = 0; off + (int64_t)es <= rows * row_bytes; off += (int64_t)es) memcpy(b + off, pat, es);
}
static inline int64_t vtp_rows_unwritten(const void *buf, const char *dtype, int64_t rows, int64_t row_bytes) {
    unsigned char pat[8]; size_t es; vtp__pat(dtype, pat, &es);
    const unsigned char *b = (const unsigned char *)buf;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t off = 0; off + (int64_t)es <= row_bytes; off += (int64_t)es)
            if (!memcmp(b + r * row_bytes + off, pat, es)) { n++; break; }
    return n;
}

static inline const char *vtp_knob_env(const char *name, const char *def, int *was_read) {
    const char *v = getenv(name);
    if (was_read) *was_read = v != NULL;
    return v ? v : def;
}

/* ---- sha256 */
struct vtp__sha { uint32_t h[8]; unsigned char buf[64]; uint64_t len; size_t n; };
static inline void vtp__sha_block(vtp__sha *s, const unsigned char *p) {
    static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
#define VTP__R(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
    uint32_t w[64];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = VTP__R(w[i - 15], 7) ^ VTP__R(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = VTP__R(w[i - 2], 17) ^ VTP__R(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (VTP__R(e, 6) ^ VTP__R(e, 11) ^ VTP__R(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (VTP__R(a, 2) ^ VTP__R(a, 13) ^ VTP__R(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
#undef VTP__R
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d; s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}
static inline void vtp__sha_init(vtp__sha *s) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, H0, sizeof H0); s->len = 0; s->n = 0;
}
static inline void vtp__sha_upd(vtp__sha *s, const unsigned char *p, size_t n) {
    s->len += n;
    while (n) {
        size_t k = std::min(n, (size_t)64 - s->n);
        memcpy(s->buf + s->n, p, k); s->n += k; p += k; n -= k;
        if (s->n == 64) { vtp__sha_block(s, s->buf); s->n = 0; }
    }
}
static inline void vtp__sha_hex(vtp__sha *s, char out[65]) {
    uint64_t bits = s->len * 8;
    unsigned char pad = 0x80, z = 0;
    vtp__sha_upd(s, &pad, 1);
    while (s->n != 56) vtp__sha_upd(s, &z, 1);
    unsigned char L[8];
    for (int i = 0; i < 8; i++) L[i] = (unsigned char)(bits >> (56 - 8 * i));
    vtp__sha_upd(s, L, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", s->h[i]);
}
static inline int vtp__sha_file(vtp__sha *s, const std::string &path) {
    FILE *f = fopen(path.c_str(), "rb");
    if (!f) return -1;
    std::vector<unsigned char> b(1 << 20);
    size_t n;
    while ((n = fread(b.data(), 1, b.size(), f)) > 0) vtp__sha_upd(s, b.data(), n);
    int bad = ferror(f);
    fclose(f);
    return bad ? -1 : 0;
}
static inline int vtp_model_sha256(const char *dir, char out[65]) {
    vtp__sha s; vtp__sha_init(&s);
    std::string d(dir);
    if (vtp__sha_file(&s, d + "/config.json")) return -1;
    DIR *dp = opendir(dir);
    if (!dp) return -1;
    std::vector<std::string> names;
    while (struct dirent *e = readdir(dp)) {
        std::string n = e->d_name;
        if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) names.push_back(n);
    }
    closedir(dp);
    std::sort(names.begin(), names.end());
    for (auto &n : names) if (vtp__sha_file(&s, d + "/" + n)) return -1;
    vtp__sha_hex(&s, out);
    return 0;
}

/* ---- framing */
static inline std::string vtp__jstr(const char *s) {
    std::string o = "\"";
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { o += '\\'; o += (char)c; }
        else if (c < 0x20) { char b[8]; snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += (char)c;
    }
    return o + "\"";
}
static inline void vtp__frame(FILE *out, const std::string &hdr, const void *payload, size_t n) {
    fwrite(hdr.data(), 1, hdr.size(), out);
    fputc('\n', out);
    if (n) fwrite(payload, 1, n, out);
    fflush(out);
}
static inline void vtp__error(FILE *out, const std::string &id, const std::string &msg) {
    vtp__frame(out, "{\"type\":\"error\",\"id\":" + id + ",\"message\":" + vtp__jstr(msg.c_str()) + "}", NULL, 0);
}

static inline int vtp_serve(FILE *in, FILE *out, const vtp_hello *h, vtp_forward_fn fn, void *user) {
    std::string hs = "{\"type\":\"hello\",\"protocol\":1,\"engine\":{\"name\":" + vtp__jstr(h->engine) +
                     ",\"version\":" + vtp__jstr(h->version) + ",\"commit\":" + vtp__jstr(h->commit) +
                     "},\"model\":{\"sha256\":" + vtp__jstr(h->model_sha256) + ",\"vocab\":" + std::to_string(h->vocab) +
                     ",\"hidden\":" + std::to_string(h->hidden) + ",\"n_layers\":" + std::to_string(h->n_layers) +
                     ",\"layer_kinds\":" + vtp__jstr(h->layer_kinds) + "},\"knobs\":[";
    for (int i = 0; i < h->n_knobs; i++) {
        const vtp_knob *k = &h->knobs[i];
        hs += std::string(i ? "," : "") + "{\"name\":" + vtp__jstr(k->name) + ",\"type\":" + vtp__jstr(k->type) + ",\"values\":[";
        std::string v = k->values ? k->values : "";
        size_t st = 0; bool first = true;
        while (!v.empty() && st <= v.size()) {
            size_t e = v.find('|', st);
            if (e == std::string::npos) e = v.size();
            hs += std::string(first ? "" : ",") + vtp__jstr(v.substr(st, e - st).c_str());
            first = false; st = e + 1;
        }
        hs += "],\"default\":" + vtp__jstr(k->def) + ",\"numeric\":" + (k->numeric ? "true" : "false") +
              ",\"value\":" + vtp__jstr(k->value) + ",\"read\":" + (k->read ? "true" : "false") + "}";
    }
    hs += "],\"probe_sites\":[";
    for (int i = 0; i < h->n_probe_sites; i++) hs += std::string(i ? "," : "") + vtp__jstr(h->probe_sites[i]);
    hs += "],\"faults\":[";
    for (int i = 0; i < h->n_faults; i++) {
        const vtp_fault *f = &h->faults[i];
        hs += std::string(i ? "," : "") + "{\"name\":" + vtp__jstr(f->name) + ",\"knob\":" + vtp__jstr(f->knob) +
              ",\"site\":" + vtp__jstr(f->site) + ",\"description\":" + vtp__jstr(f->description) + "}";
    }
    hs += std::string("],\"deterministic\":") + (h->deterministic ? "true" : "false") +
          ",\"capture\":" + (h->capture ? "true" : "false") + "}";
    vtp__frame(out, hs, NULL, 0);
    vtp_probes pr; memset(&pr, 0, sizeof pr); pr.mode = vtp_probe_mode_env();
    std::vector<float> buf;
    for (;;) {
        std::string line;
        int c;
        while ((c = fgetc(in)) != EOF && c != '\n') line += (char)c;
        if (c == EOF && line.empty()) break;
        std::string id = "null";
        int64_t pb = 0, T = 0; bool cap = false; std::string type;
        try {
            dev::Json j = dev::json_parse(line);
            if (const dev::Json *x = j.get("id")) if (x->kind == dev::Json::Number) id = x->str;
            if (const dev::Json *x = j.get("payload_bytes")) pb = x->as_int();
            if (const dev::Json *x = j.get("tokens")) T = x->as_int();
            if (const dev::Json *x = j.get("capture")) cap = x->kind == dev::Json::Bool && x->b;
            if (const dev::Json *x = j.get("type")) if (x->kind == dev::Json::String) type = x->str;
        } catch (const std::exception &e) {
            vtp__error(out, "null", std::string("bad header: ") + e.what());
            if (c == EOF) break;
            continue;
        }
        std::vector<unsigned char> payload((size_t)std::max<int64_t>(pb, 0));
        if (pb > 0 && fread(payload.data(), 1, (size_t)pb, in) != (size_t)pb) break;
        if (type != "forward") { vtp__error(out, id, "unknown message type '" + type + "'"); continue; }
        if (T <= 0 || pb != 4 * T) {
            vtp__error(out, id, "payload_bytes " + std::to_string(pb) + " != 4*tokens (" + std::to_string(T) + ")");
            continue;
        }
        std::vector<int32_t> tok((size_t)T);
        memcpy(tok.data(), payload.data(), (size_t)pb);
        for (int64_t t = 0; t < T; t++)
            if (tok[t] < 0 || tok[t] >= h->vocab) { vtp__error(out, id, "tokens: id " + std::to_string(tok[t]) + " >= vocab"); goto next; }
        {
            bool res = cap && h->capture;
            size_t nl = (size_t)(T * h->vocab), nr = res ? (size_t)(h->n_layers * 2 * T * h->hidden) : 0;
            buf.assign(nl + nr, 0.0f);
            pr.n = 0; pr.lost = 0;
            char err[512] = "";
            if (fn(user, tok.data(), T, buf.data(), res ? buf.data() + nl : NULL, &pr, err, sizeof err)) {
                vtp__error(out, id, err);
                continue;
            }
            std::string hd = "{\"type\":\"logits\",\"id\":" + id + ",\"tokens\":" + std::to_string(T) + ",\"vocab\":" +
                             std::to_string(h->vocab) + ",\"residuals\":" + (res ? "true" : "false") +
                             ",\"payload_bytes\":" + std::to_string(4 * (nl + nr)) + ",\"probes\":[";
            for (int64_t i = 0; i < pr.n; i++) {
                const vtp_record *r = &pr.recs[i];
                char b[1024];
                snprintf(b, sizeof b, "%s{\"site\":%s,\"layer\":%d,\"dtype\":%s,\"src_dtype\":%s,\"calls\":%" PRId64
                         ",\"rows\":%" PRId64 ",\"bytes_per_row\":%" PRId64 ",\"src_row_bytes\":%" PRId64
                         ",\"dst_row_bytes\":%" PRId64 ",\"converting\":%d,\"violations\":%" PRId64
                         ",\"rows_unwritten\":%" PRId64 ",\"detail\":%s}",
                         i ? "," : "", vtp__jstr(r->site).c_str(), r->layer, vtp__jstr(r->dtype).c_str(),
                         vtp__jstr(r->src_dtype).c_str(), r->calls, r->rows, r->bytes_per_row, r->src_row_bytes,
                         r->dst_row_bytes, r->converting, r->violations, r->rows_unwritten, vtp__jstr(r->detail).c_str());
                hd += b;
            }
            hd += "]}";
            vtp__frame(out, hd, buf.data(), 4 * (nl + nr));
        }
    next:;
    }
    free(pr.recs);
    return 0;
}
