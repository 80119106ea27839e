/*
 * synth.c — deterministic synthetic Kimi-Linear checkpoints (`vtlab synth`).
 *
 * The lab needs models it can make anywhere, with no download, whose numbers
 * behave like a trained model's in the ways the experiments care about: the
 * residual stream stays O(1) through the layers, the KDA states remember for
 * more than a token, the router's bias matters, and the output distribution
 * is peaked. So each tensor is drawn at a scale chosen for its role:
 *
 *   linear [out, in]   U(-a, a), a = sqrt(3 / in): variance 1/in (fan-in)
 *   embedding          U(-sqrt 3, sqrt 3): variance 1
 *   norm weights       U(0.9, 1.1): near 1
 *   conv [P, 1, K]     U(-a, a), a = sqrt(3 / K)
 *   A_log              log U(1, 16)                       (FLA / Mamba init)
 *   dt_bias            softplus^-1(dt), dt log-uniform in [1e-3, 1e-1]
 *   router bias        U(-0.2, 0.2): nonzero, so the choice differs from the weights
 *   lm_head            linear scale times VT_SYNTH_LM_HEAD_GAIN: a peaked softmax
 *
 * Determinism "on any machine": every tensor has its own splitmix64 stream
 * seeded from (seed, FNV-1a of its name), values are produced in double with
 * only + - * / and our own exp/log (no libm transcendental, whose last bit may
 * differ between C libraries), then rounded once to the output dtype.
 */
#include "vt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "dtype.h"
#include "fileio.h"
#include "safetensors.h"

/* lm_head gain over the fan-in scale: measured on the tiny config to give a
 * top-1 probability mostly in 0.1-0.6 on random token inputs (see the test). */
#define VT_SYNTH_LM_HEAD_GAIN 3.5

/* Bump when anything below changes the bytes synth writes (see vt.h).
 * 1: first scales; 2: residual-branch scaling and lm_head gain 3.5. */
#define VT_SYNTH_VERSION 2

int vt_synth_version(void) { return VT_SYNTH_VERSION; }

typedef struct { uint64_t s; } rng_t;

static uint64_t splitmix64(rng_t *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits: exact in double. */
static double uniform01(rng_t *r) { return (double)(splitmix64(r) >> 11) * (1.0 / 9007199254740992.0); }

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    return h;
}

/* exp and log from basic arithmetic only (see the banner): range reduction by
 * powers of two, then a series that converges in a fixed number of terms. The
 * results are accurate to ~1e-15 relative, far below the f32 output rounding. */
static double det_exp(double x) {
    const double LN2 = 0.69314718055994530942;
    int k = 0;
    while (x > LN2 / 2) { x -= LN2; k++; }
    while (x < -LN2 / 2) { x += LN2; k--; }
    double term = 1.0, sum = 1.0;
    for (int i = 1; i < 24; i++) { term *= x / i; sum += term; }
    while (k > 0) { sum *= 2.0; k--; }
    while (k < 0) { sum *= 0.5; k++; }
    return sum;
}

static double det_log(double x) {   /* x > 0 */
    const double LN2 = 0.69314718055994530942;
    int k = 0;
    while (x > 1.5) { x *= 0.5; k++; }
    while (x < 0.75) { x *= 2.0; k--; }
    /* log x = 2 atanh((x-1)/(x+1)); |z| <= 0.2 so 30 terms are plenty */
    double z = (x - 1.0) / (x + 1.0), z2 = z * z, term = z, sum = 0.0;
    for (int i = 0; i < 30; i++) { sum += term / (2 * i + 1); term *= z2; }
    return 2.0 * sum + k * LN2;
}

static double init_value(const vt_tensor_spec *sp, rng_t *r, double scale) {
    double u = uniform01(r);
    switch (sp->role) {
    case VT_ROLE_NORM:        return 0.9 + 0.2 * u;
    case VT_ROLE_A_LOG:       return det_log(1.0 + 15.0 * u);
    case VT_ROLE_DT_BIAS: {
        double dt = det_exp(det_log(1e-3) + u * (det_log(1e-1) - det_log(1e-3)));
        return det_log(det_exp(dt) - 1.0);      /* softplus^-1(dt) = log(expm1(dt)) */
    }
    case VT_ROLE_ROUTER_BIAS: return -0.2 + 0.4 * u;
    default:                  return scale * (2.0 * u - 1.0);
    }
}

static int ends_with(const char *s, const char *suffix) {
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* Half-width a of U(-a, a) for the roles drawn symmetrically. The last
 * projection of every residual branch (o_proj, down_proj, w2) is scaled down
 * by 1/sqrt(2 L), as GPT-2 initialises them: each block then adds a small
 * update to a stream that keeps its history, as in a trained model, instead of
 * overwriting it — without that, one flipped expert choice rewrites a token. */
static double role_scale(const vt_tensor_spec *sp, int64_t n_layers) {
    int64_t fan_in = sp->shape[sp->ndim - 1];
    double branch = 1.0;
    if (ends_with(sp->name, ".o_proj.weight") || ends_with(sp->name, ".down_proj.weight") ||
        ends_with(sp->name, ".w2.weight"))
        branch = 1.0 / sqrt(2.0 * (double)n_layers);
    switch (sp->role) {
    case VT_ROLE_EMBED:   return sqrt(3.0);
    case VT_ROLE_LM_HEAD: return VT_SYNTH_LM_HEAD_GAIN * sqrt(3.0 / (double)fan_in);
    case VT_ROLE_CONV:    return sqrt(3.0 / (double)fan_in);
    default:              return branch * sqrt(3.0 / (double)fan_in);
    }
}

static int mkdir_p(const char *dir, char *err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) goto fail;
    return VT_STATUS_OK;
fail:
    snprintf(err, errlen, "%s: cannot create directory: %s", tmp, strerror(errno));
    return VT_STATUS_IO;
}

static int read_file(const char *path, char **out, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return VT_STATUS_INPUT;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) { char *nb = realloc(buf, cap *= 2); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    fclose(f);
    if (!buf) { snprintf(err, errlen, "%s: out of memory", path); return VT_STATUS_NOMEM; }
    *out = buf;
    *len = n;
    return VT_STATUS_OK;
}

int vt_synth(const char *config_path, uint64_t seed, const char *dtype_name, const char *out_dir,
             char *err, size_t errlen) {
    vt_err e = {0};
    vt_dtype wdt;
    if (vt_dtype_from_name(dtype_name, &wdt) != 0 || (wdt != VT_F32 && wdt != VT_BF16 && wdt != VT_F16)) {
        snprintf(err, errlen, "synth: --dtype %s, expected f32, bf16 or f16", dtype_name);
        return VT_STATUS_INPUT;
    }
    char *json = NULL;
    size_t json_len = 0;
    int rc = read_file(config_path, &json, &json_len, err, errlen);
    if (rc) return rc;
    vt_config cfg;
    rc = vt_config_parse(json, json_len, config_path, &cfg, &e);
    vt_tensor_spec *specs = NULL;
    size_t nspec = 0;
    if (!rc) rc = vt_config_tensor_specs(&cfg, &specs, &nspec, &e);
    if (rc) { snprintf(err, errlen, "%s", e.msg); free(json); return rc; }

    rc = mkdir_p(out_dir, err, errlen);
    if (rc) goto done;

    char path[4200];
    vt_st_writer *w = NULL;
    rc = vt_st_writer_new(&w, &e);
    if (!rc) rc = vt_st_writer_meta(w, "format", "pt", &e);
    if (!rc) rc = vt_st_writer_meta(w, "generator", "vtlab synth", &e);
    char seedtxt[32];
    snprintf(seedtxt, sizeof seedtxt, "%llu", (unsigned long long)seed);
    if (!rc) rc = vt_st_writer_meta(w, "seed", seedtxt, &e);
    for (size_t i = 0; !rc && i < nspec; i++)
        rc = vt_st_writer_declare(w, specs[i].name, specs[i].f32_only ? VT_F32 : wdt, specs[i].ndim, specs[i].shape, &e);
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (!rc) rc = vt_st_writer_begin(w, path, &e);

    size_t cap = 0;
    void *outbuf = NULL;
    for (size_t i = 0; !rc && i < nspec; i++) {
        const vt_tensor_spec *sp = &specs[i];
        vt_dtype dt = sp->f32_only ? VT_F32 : wdt;
        size_t n = 1;
        for (int d = 0; d < sp->ndim; d++) n *= (size_t)sp->shape[d];
        if (n > cap) {
            free(outbuf);
            outbuf = malloc(vt_row_size(VT_F32, (int64_t)n));
            cap = n;
            if (!outbuf) { rc = vt_errf(&e, VT_ENOMEM, "synth: out of memory for %s", sp->name); break; }
        }
        rng_t r = {seed * 0x9E3779B97F4A7C15ull ^ fnv1a(sp->name)};
        double scale = role_scale(sp, cfg.num_hidden_layers);
        float *f = outbuf;
        for (size_t k = 0; k < n; k++) f[k] = (float)init_value(sp, &r, scale);
        /* Narrowing in place is safe front to back: element k's 2-byte output
         * lands below every f32 input not yet read. */
        if (dt != VT_F32) vt_convert(outbuf, dt, outbuf, VT_F32, n);
        rc = vt_st_writer_put(w, outbuf, vt_row_size(dt, (int64_t)n), &e);
    }
    free(outbuf);
    if (!rc) rc = vt_st_writer_finish(w, &e);
    vt_st_writer_free(w);
    if (rc) { snprintf(err, errlen, "%s", e.msg); goto done; }

    snprintf(path, sizeof path, "%s/config.json", out_dir);
    rc = vt_file_write_atomic(path, json, json_len, &e);
    if (rc) snprintf(err, errlen, "%s", e.msg);
done:
    free(specs);
    free(json);
    return rc;
}
