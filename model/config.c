/*
 * config.c — the Kimi-Linear config.json, the tensor list it implies, and the
 * load-time check of a checkpoint against that list.
 *
 * Why so strict. A config is the one place where a wrong number becomes a
 * wrong model without any error: a layer listed as both KDA and MLA, a top-k
 * larger than the expert count, or a query LoRA rank this code does not
 * implement would each run and produce plausible, meaningless logits. So every
 * field the forward pass reads is parsed with its type checked, every setting
 * this implementation cannot run is refused by name, and each message names
 * the file, the field and what was expected ("FILE: field hidden_size:
 * expected a positive integer, got \"abc\"").
 *
 * Why bounds beyond "positive". The config comes from outside (and is a fuzz
 * target). Its numbers size every later allocation: num_experts x layers
 * tensor specs, and dimension products in every shape. Parsing therefore caps
 * each dimension, the number of experts and layers, the number of tensors the
 * config implies and its total parameter count, so that everything derived
 * from an accepted config fits int64_t (even as a byte count) and
 * vt_config_tensor_specs never asks for gigabytes.
 *
 * Why one enumerator. The tensor list is produced by a single walk (emit_all)
 * that either counts or fills. Parsing runs it in counting mode to enforce the
 * caps, vt_config_tensor_specs runs it again to fill: the count checked and
 * the list produced cannot disagree.
 */
#include "config.h"
#include "fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Limits on what an accepted config may imply. Generous for real models (the
 * 48B config implies about 20k tensors and 4.9e10 parameters; Kimi K2-sized
 * MoE stacks about 70k tensors and 1e12), small enough that a malicious or
 * fuzzed config cannot make the tensor list or any int64 size overflow. */
#define CFG_MAX_DIM        ((int64_t)1 << 24)   /* any single dimension or count */
#define CFG_MAX_EXPERTS    4096
#define CFG_MAX_TENSORS    ((uint64_t)1 << 19)  /* specs: 512Ki x sizeof(vt_tensor_spec) ~ 92 MB */
#define CFG_MAX_PARAMS     ((uint64_t)1 << 44)  /* elements in all tensors: x8 bytes still fits int64 */
#define CFG_MAX_FILE_BYTES ((size_t)16 << 20)   /* a config.json is a few KiB */
#define CFG_MAX_INT_JSON   9007199254740992.0   /* 2^53: larger doubles are not exact integers */

/* ------------------------------------------------------------ JSON helpers */

typedef struct pctx {
    const char *fname;   /* for messages */
    vt_err     *err;
} pctx;

/* A short, one-line rendering of a JSON value for "got ..." in messages:
 * strings quoted and cut at 40 characters, control characters replaced. */
static void describe(const cJSON *v, char *buf, size_t n) {
    if (!v) { snprintf(buf, n, "nothing"); return; }
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring ? v->valuestring : "";
        size_t o = 0;
        buf[o++] = '"';
        size_t i = 0;
        for (; s[i] && i < 40 && o + 6 < n; i++) {
            unsigned char c = (unsigned char)s[i];
            buf[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        }
        if (s[i] && o + 5 < n) { memcpy(buf + o, "...", 3); o += 3; }
        buf[o++] = '"';
        buf[o] = '\0';
    } else if (cJSON_IsNumber(v)) {
        /* the shortest form that reads back as the same double: 0.1, not 0.10000000000000001 */
        snprintf(buf, n, "%.15g", v->valuedouble);
        if (strtod(buf, NULL) != v->valuedouble) snprintf(buf, n, "%.17g", v->valuedouble);
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, n, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, n, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, n, "null");
    } else if (cJSON_IsArray(v)) {
        snprintf(buf, n, "an array");
    } else if (cJSON_IsObject(v)) {
        snprintf(buf, n, "an object");
    } else {
        snprintf(buf, n, "an invalid value");
    }
}

static int err_missing(pctx *c, const char *field, const char *expect) {
    return vt_errf(c->err, VT_EINPUT, "%s: field %s: missing (expected %s)", c->fname, field, expect);
}

static int err_type(pctx *c, const char *field, const char *expect, const cJSON *got) {
    char g[64];
    describe(got, g, sizeof g);
    return vt_errf(c->err, VT_EINPUT, "%s: field %s: expected %s, got %s", c->fname, field, expect, g);
}

static int err_unsupported(pctx *c, const char *field, const cJSON *got, const char *why) {
    char g[64];
    describe(got, g, sizeof g);
    return vt_errf(c->err, VT_EINPUT, "%s: field %s: %s not supported (%s)", c->fname, field, g, why);
}

/* JSON numbers are doubles; an integer field must hold an exact integer. */
static int as_integer(const cJSON *v, int64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > CFG_MAX_INT_JSON) return -1;
    *out = (int64_t)d;
    return 0;
}

/* An integer field in [lo, hi]. Absent: an error when required, else *out =
 * def. Below lo or not an integer: a type error ("expected a positive
 * integer"); above hi: a limit error, since the value is well-formed but more
 * than this implementation accepts. null counts as absent when null_ok. */
static int get_int(pctx *c, const cJSON *obj, const char *path, const char *key, int required,
                   int null_ok, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
    char field[96];
    snprintf(field, sizeof field, "%s%s", path, key);
    char expect[48];
    if (lo == 1) snprintf(expect, sizeof expect, "a positive integer");
    else if (lo == 0) snprintf(expect, sizeof expect, "a non-negative integer");
    else snprintf(expect, sizeof expect, "an integer >= %lld", (long long)lo);

    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || (null_ok && cJSON_IsNull(v))) {
        if (required) return err_missing(c, field, expect);
        *out = def;
        return VT_OK;
    }
    int64_t x;
    if (as_integer(v, &x) != 0 || x < lo) return err_type(c, field, expect, v);
    if (x > hi)
        return vt_errf(c->err, VT_EINPUT, "%s: field %s: %lld is more than the limit of %lld",
                       c->fname, field, (long long)x, (long long)hi);
    *out = x;
    return VT_OK;
}

/* A required number > 0 (eps, scaling factor). */
static int get_pos_double(pctx *c, const cJSON *obj, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return err_missing(c, key, "a positive number");
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > 0))
        return err_type(c, key, "a positive number", v);
    *out = v->valuedouble;
    return VT_OK;
}

static int get_bool(pctx *c, const cJSON *obj, const char *key, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) { *out = def; return VT_OK; }
    if (!cJSON_IsBool(v)) return err_type(c, key, "true or false", v);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return VT_OK;
}

/* An optional string that must equal `only` (the one value this code runs). */
static int get_only_string(pctx *c, const cJSON *obj, const char *key, const char *only,
                           const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return VT_OK;
    if (!cJSON_IsString(v) || !v->valuestring) {
        char expect[64];
        snprintf(expect, sizeof expect, "a string (\"%s\")", only);
        return err_type(c, key, expect, v);
    }
    if (strcmp(v->valuestring, only) != 0) return err_unsupported(c, key, v, why);
    return VT_OK;
}

/* --------------------------------------------------------- the layer lists */

/* Marks each 1-based layer of one list with `kind` in cfg->layer_kind. Every
 * entry must be an integer in 1..L, listed once, and not already claimed by
 * the other list. */
static int mark_layers(pctx *c, const cJSON *lac, const char *key, vt_layer_kind kind, vt_config *cfg) {
    char field[64];
    snprintf(field, sizeof field, "linear_attn_config.%s", key);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(lac, key);
    if (!arr) return err_missing(c, field, "an array of 1-based layer numbers");
    if (!cJSON_IsArray(arr)) return err_type(c, field, "an array of 1-based layer numbers", arr);

    const int64_t L = cfg->num_hidden_layers;
    int64_t idx = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        int64_t layer;
        if (as_integer(e, &layer) != 0) {
            char g[64];
            describe(e, g, sizeof g);
            return vt_errf(c->err, VT_EINPUT, "%s: field %s: entry %lld: expected a layer number, got %s",
                           c->fname, field, (long long)idx, g);
        }
        if (layer < 1 || layer > L)
            return vt_errf(c->err, VT_EINPUT,
                           "%s: field %s: layer %lld is out of range 1..%lld (layers are 1-based; "
                           "num_hidden_layers is %lld)",
                           c->fname, field, (long long)layer, (long long)L, (long long)L);
        vt_layer_kind *slot = &cfg->layer_kind[layer - 1];
        if (*slot == kind)
            return vt_errf(c->err, VT_EINPUT, "%s: field %s: layer %lld is listed twice", c->fname, field,
                           (long long)layer);
        if (*slot != VT_LAYER_NONE)
            return vt_errf(c->err, VT_EINPUT,
                           "%s: field %s: layer %lld is in both kda_layers and full_attn_layers",
                           c->fname, field, (long long)layer);
        *slot = kind;
        idx++;
    }
    return VT_OK;
}

/* ------------------------------------------------------------- the tensors */

/* One walk over every tensor of a config, in canonical order. With out ==
 * NULL it only counts tensors and elements (saturating), which is how parse
 * enforces the caps before anything is allocated. */
typedef struct emitter {
    vt_tensor_spec *out;      /* NULL: count only */
    size_t          n;        /* tensors emitted so far */
    uint64_t        elems;    /* total elements, saturating at UINT64_MAX */
    int             bad_name; /* a name did not fit vt_tensor_spec.name */
} emitter;

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
    return a * b;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
    return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

__attribute__((format(printf, 6, 7)))
static void emit(emitter *em, vt_tensor_role role, int f32_only, const int64_t *shape, int ndim,
                 const char *fmt, ...) {
    uint64_t ne = 1;
    for (int d = 0; d < ndim; d++) ne = sat_mul(ne, (uint64_t)shape[d]);
    em->elems = sat_add(em->elems, ne);
    if (em->out) {
        vt_tensor_spec *s = &em->out[em->n];
        memset(s, 0, sizeof *s);
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(s->name, sizeof s->name, fmt, ap);
        va_end(ap);
        if (w < 0 || (size_t)w >= sizeof s->name) em->bad_name = 1;
        s->ndim = ndim;
        for (int d = 0; d < ndim; d++) s->shape[d] = shape[d];
        s->role = role;
        s->f32_only = f32_only;
    }
    em->n++;
}

/* E(em, role, f32_only, (d0, d1, ...), fmt, ...): emit with the shape written
 * inline; SHAPE turns "(d0, d1)" into "array, ndim", and E_ re-splits the
 * expanded arguments so that they reach emit as separate parameters. */
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__}), \
                   (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define E_(...) emit(__VA_ARGS__)
#define E(em, role, f32, dims, ...) E_((em), (role), (f32), SHAPE dims, __VA_ARGS__)

static void emit_all(const vt_config *cfg, emitter *em) {
    const int64_t V = cfg->vocab_size, D = cfg->hidden_size;
    const int64_t H = cfg->kda_num_heads, d = cfg->kda_head_dim, P = H * d, K = cfg->short_conv_kernel_size;
    const int64_t Nh = cfg->num_attention_heads, nope = cfg->qk_nope_head_dim, rope = cfg->qk_rope_head_dim;
    const int64_t dv = cfg->v_head_dim, rkv = cfg->kv_lora_rank;
    const int64_t I = cfg->intermediate_size, Ex = cfg->num_experts, Im = cfg->moe_intermediate_size;
    const int64_t S = cfg->num_shared_experts;

    E(em, VT_ROLE_EMBED, 0, (V, D), "model.embed_tokens.weight");
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++) {
        const long long li = (long long)i;
        E(em, VT_ROLE_NORM, 0, (D), "model.layers.%lld.input_layernorm.weight", li);
        if (cfg->layer_kind[i] == VT_LAYER_KDA) {
            static const char *const qkv[3] = {"q", "k", "v"};
            for (int j = 0; j < 3; j++)
                E(em, VT_ROLE_LINEAR, 0, (P, D), "model.layers.%lld.self_attn.%s_proj.weight", li, qkv[j]);
            for (int j = 0; j < 3; j++)
                E(em, VT_ROLE_CONV, 0, (P, 1, K), "model.layers.%lld.self_attn.%s_conv1d.weight", li, qkv[j]);
            E(em, VT_ROLE_A_LOG, 1, (1, 1, H, 1), "model.layers.%lld.self_attn.A_log", li);
            E(em, VT_ROLE_DT_BIAS, 1, (P), "model.layers.%lld.self_attn.dt_bias", li);
            E(em, VT_ROLE_LINEAR, 0, (d, D), "model.layers.%lld.self_attn.f_a_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (P, d), "model.layers.%lld.self_attn.f_b_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (H, D), "model.layers.%lld.self_attn.b_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (d, D), "model.layers.%lld.self_attn.g_a_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (P, d), "model.layers.%lld.self_attn.g_b_proj.weight", li);
            E(em, VT_ROLE_NORM, 0, (d), "model.layers.%lld.self_attn.o_norm.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (D, P), "model.layers.%lld.self_attn.o_proj.weight", li);
        } else {
            E(em, VT_ROLE_LINEAR, 0, (Nh * (nope + rope), D), "model.layers.%lld.self_attn.q_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (rkv + rope, D), "model.layers.%lld.self_attn.kv_a_proj_with_mqa.weight", li);
            E(em, VT_ROLE_NORM, 0, (rkv), "model.layers.%lld.self_attn.kv_a_layernorm.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (Nh * (nope + dv), rkv), "model.layers.%lld.self_attn.kv_b_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (D, Nh * dv), "model.layers.%lld.self_attn.o_proj.weight", li);
        }
        E(em, VT_ROLE_NORM, 0, (D), "model.layers.%lld.post_attention_layernorm.weight", li);
        if (vt_config_layer_is_moe(cfg, i)) {
            E(em, VT_ROLE_LINEAR, 0, (Ex, D), "model.layers.%lld.block_sparse_moe.gate.weight", li);
            E(em, VT_ROLE_ROUTER_BIAS, 1, (Ex), "model.layers.%lld.block_sparse_moe.gate.e_score_correction_bias", li);
            for (int64_t e = 0; e < Ex; e++) {
                const long long le = (long long)e;
                E(em, VT_ROLE_LINEAR, 0, (Im, D), "model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", li, le);
                E(em, VT_ROLE_LINEAR, 0, (D, Im), "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", li, le);
                E(em, VT_ROLE_LINEAR, 0, (Im, D), "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", li, le);
            }
            if (S > 0) {
                E(em, VT_ROLE_LINEAR, 0, (Im * S, D), "model.layers.%lld.block_sparse_moe.shared_experts.gate_proj.weight", li);
                E(em, VT_ROLE_LINEAR, 0, (Im * S, D), "model.layers.%lld.block_sparse_moe.shared_experts.up_proj.weight", li);
                E(em, VT_ROLE_LINEAR, 0, (D, Im * S), "model.layers.%lld.block_sparse_moe.shared_experts.down_proj.weight", li);
            }
        } else {
            E(em, VT_ROLE_LINEAR, 0, (I, D), "model.layers.%lld.mlp.gate_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (I, D), "model.layers.%lld.mlp.up_proj.weight", li);
            E(em, VT_ROLE_LINEAR, 0, (D, I), "model.layers.%lld.mlp.down_proj.weight", li);
        }
    }
    E(em, VT_ROLE_NORM, 0, (D), "model.norm.weight");
    E(em, VT_ROLE_LM_HEAD, 0, (V, D), "lm_head.weight");
}

/* The bounds every consumer of a vt_config relies on. parse establishes them;
 * tensor_specs rechecks them because a caller may fill a vt_config by hand. */
static int check_bounds(const vt_config *cfg, const char *fname, vt_err *err) {
    if (cfg->num_hidden_layers < 1 || cfg->num_hidden_layers > VT_MAX_LAYERS)
        return vt_errf(err, VT_EINPUT, "%s: num_hidden_layers %lld is outside 1..%d", fname,
                       (long long)cfg->num_hidden_layers, VT_MAX_LAYERS);
    if (cfg->num_experts < 1 || cfg->num_experts > CFG_MAX_EXPERTS)
        return vt_errf(err, VT_EINPUT, "%s: num_experts %lld is outside 1..%d", fname,
                       (long long)cfg->num_experts, CFG_MAX_EXPERTS);
    if (cfg->moe_layer_freq < 1)
        return vt_errf(err, VT_EINPUT, "%s: moe_layer_freq %lld is not positive", fname,
                       (long long)cfg->moe_layer_freq);
    const struct { const char *name; int64_t v; int64_t lo; } dims[] = {
        {"vocab_size", cfg->vocab_size, 1}, {"hidden_size", cfg->hidden_size, 1},
        {"intermediate_size", cfg->intermediate_size, 1},
        {"num_attention_heads", cfg->num_attention_heads, 1}, {"kv_lora_rank", cfg->kv_lora_rank, 1},
        {"qk_nope_head_dim", cfg->qk_nope_head_dim, 1}, {"qk_rope_head_dim", cfg->qk_rope_head_dim, 1},
        {"v_head_dim", cfg->v_head_dim, 1}, {"linear_attn_config.num_heads", cfg->kda_num_heads, 1},
        {"linear_attn_config.head_dim", cfg->kda_head_dim, 1},
        {"linear_attn_config.short_conv_kernel_size", cfg->short_conv_kernel_size, 1},
        {"moe_intermediate_size", cfg->moe_intermediate_size, 1},
        {"num_shared_experts", cfg->num_shared_experts, 0},
    };
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        if (dims[k].v < dims[k].lo || dims[k].v > CFG_MAX_DIM)
            return vt_errf(err, VT_EINPUT, "%s: %s %lld is outside %lld..%lld", fname, dims[k].name,
                           (long long)dims[k].v, (long long)dims[k].lo, (long long)CFG_MAX_DIM);
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        if (cfg->layer_kind[i] != VT_LAYER_KDA && cfg->layer_kind[i] != VT_LAYER_MLA)
            return vt_errf(err, VT_EINPUT, "%s: layer %lld is in neither kda_layers nor full_attn_layers",
                           fname, (long long)i + 1);
    emitter em = {0};
    emit_all(cfg, &em);
    if (em.n > CFG_MAX_TENSORS)
        return vt_errf(err, VT_EINPUT,
                       "%s: config implies %zu tensors, more than the limit of %llu "
                       "(num_experts x MoE layers too large)",
                       fname, em.n, (unsigned long long)CFG_MAX_TENSORS);
    if (em.elems > CFG_MAX_PARAMS)
        return vt_errf(err, VT_EINPUT, "%s: config implies more than %llu parameters (%s)", fname,
                       (unsigned long long)CFG_MAX_PARAMS, "dimensions too large");
    return VT_OK;
}

/* ------------------------------------------------------------------- parse */

/* The parse in the order of the fields' groups, each group one function:
 * the first bad field is the one reported, so the order is part of the
 * behaviour (tests/cli/test_bad_configs.sh pins messages). REQ and OPT read
 * an integer field of the top level into dst, returning from the group on
 * the first bad one. */
#define REQ(key, lo, hi, dst) \
    if ((rc = get_int(c, root, "", key, 1, 0, 0, lo, hi, dst)) != VT_OK) return rc
#define OPT(key, def, lo, hi, dst) \
    if ((rc = get_int(c, root, "", key, 0, 0, def, lo, hi, dst)) != VT_OK) return rc

/* model_type, the model's sizes, the norm epsilon and an untied lm_head. */
static int parse_model(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    const int64_t M = CFG_MAX_DIM;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!mt) return err_missing(c, "model_type", "\"kimi_linear\"");
    if (!cJSON_IsString(mt) || !mt->valuestring || strcmp(mt->valuestring, "kimi_linear") != 0)
        return err_type(c, "model_type", "\"kimi_linear\"", mt);

    REQ("vocab_size", 1, M, &cfg->vocab_size);
    REQ("hidden_size", 1, M, &cfg->hidden_size);
    REQ("num_hidden_layers", 1, VT_MAX_LAYERS, &cfg->num_hidden_layers);
    REQ("intermediate_size", 1, M, &cfg->intermediate_size);
    if ((rc = get_pos_double(c, root, "rms_norm_eps", &cfg->rms_norm_eps)) != VT_OK) return rc;

    /* tie_word_embeddings: the checkpoint carries its own lm_head. */
    if ((rc = get_bool(c, root, "tie_word_embeddings", 0, &cfg->tie_word_embeddings)) != VT_OK) return rc;
    if (cfg->tie_word_embeddings)
        return err_unsupported(c, "tie_word_embeddings", cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings"),
                               "lm_head must be its own tensor");
    return VT_OK;
}

/* MLA: NoPE only, queries without a low-rank projection. */
static int parse_mla(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    const int64_t M = CFG_MAX_DIM;
    REQ("num_attention_heads", 1, M, &cfg->num_attention_heads);
    OPT("num_key_value_heads", cfg->num_attention_heads, 1, M, &cfg->num_key_value_heads);
    REQ("kv_lora_rank", 1, M, &cfg->kv_lora_rank);
    REQ("qk_nope_head_dim", 1, M, &cfg->qk_nope_head_dim);
    REQ("qk_rope_head_dim", 1, M, &cfg->qk_rope_head_dim);
    REQ("v_head_dim", 1, M, &cfg->v_head_dim);
    if ((rc = get_bool(c, root, "mla_use_nope", 1, &cfg->mla_use_nope)) != VT_OK) return rc;
    if (!cfg->mla_use_nope)
        return err_unsupported(c, "mla_use_nope", cJSON_GetObjectItemCaseSensitive(root, "mla_use_nope"),
                               "this implementation runs NoPE MLA only, without rotary embeddings");
    const cJSON *qlr = cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank");
    if (qlr && !cJSON_IsNull(qlr)) {
        if (cJSON_IsNumber(qlr))
            return err_unsupported(c, "q_lora_rank", qlr, "expected null: queries have no low-rank projection here");
        return err_type(c, "q_lora_rank", "null", qlr);
    }
    return VT_OK;
}

/* KDA: linear_attn_config, and which layers are KDA and which MLA (every
 * layer one of the two). */
static int parse_kda(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    const int64_t M = CFG_MAX_DIM;
    const cJSON *lac = cJSON_GetObjectItemCaseSensitive(root, "linear_attn_config");
    if (!lac) return err_missing(c, "linear_attn_config", "an object");
    if (!cJSON_IsObject(lac)) return err_type(c, "linear_attn_config", "an object", lac);
    const char *lp = "linear_attn_config.";
    if ((rc = get_int(c, lac, lp, "num_heads", 1, 0, 0, 1, M, &cfg->kda_num_heads)) != VT_OK) return rc;
    if ((rc = get_int(c, lac, lp, "head_dim", 1, 0, 0, 1, M, &cfg->kda_head_dim)) != VT_OK) return rc;
    if ((rc = get_int(c, lac, lp, "short_conv_kernel_size", 1, 0, 0, 1, M, &cfg->short_conv_kernel_size)) != VT_OK)
        return rc;
    for (int i = 0; i < VT_MAX_LAYERS; i++) cfg->layer_kind[i] = VT_LAYER_NONE;
    if ((rc = mark_layers(c, lac, "kda_layers", VT_LAYER_KDA, cfg)) != VT_OK) return rc;
    if ((rc = mark_layers(c, lac, "full_attn_layers", VT_LAYER_MLA, cfg)) != VT_OK) return rc;
    for (int64_t i = 0; i < cfg->num_hidden_layers; i++)
        if (cfg->layer_kind[i] == VT_LAYER_NONE)
            return vt_errf(c->err, VT_EINPUT,
                           "%s: field linear_attn_config: layer %lld is in neither kda_layers nor full_attn_layers",
                           c->fname, (long long)i + 1);
    return VT_OK;
}

/* MoE: the experts, the router (sigmoid, one group) and SiLU. */
static int parse_moe(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    const int64_t M = CFG_MAX_DIM;
    REQ("num_experts", 1, CFG_MAX_EXPERTS, &cfg->num_experts);
    REQ("num_experts_per_token", 1, M, &cfg->num_experts_per_token);
    if (cfg->num_experts_per_token > cfg->num_experts)
        return vt_errf(c->err, VT_EINPUT, "%s: field num_experts_per_token: %lld is more than num_experts (%lld)",
                       c->fname, (long long)cfg->num_experts_per_token, (long long)cfg->num_experts);
    REQ("moe_intermediate_size", 1, M, &cfg->moe_intermediate_size);
    REQ("num_shared_experts", 0, M, &cfg->num_shared_experts);
    REQ("first_k_dense_replace", 0, M, &cfg->first_k_dense_replace);
    if (cfg->first_k_dense_replace > cfg->num_hidden_layers)
        return vt_errf(c->err, VT_EINPUT, "%s: field first_k_dense_replace: %lld is more than num_hidden_layers (%lld)",
                       c->fname, (long long)cfg->first_k_dense_replace, (long long)cfg->num_hidden_layers);
    OPT("moe_layer_freq", 1, 1, M, &cfg->moe_layer_freq);
    if ((rc = get_pos_double(c, root, "routed_scaling_factor", &cfg->routed_scaling_factor)) != VT_OK) return rc;
    if ((rc = get_bool(c, root, "moe_renormalize", 1, &cfg->moe_renormalize)) != VT_OK) return rc;
    if ((rc = get_bool(c, root, "use_grouped_topk", 1, &cfg->use_grouped_topk)) != VT_OK) return rc;
    /* Group-limited routing is a no-op with one group, the only case run here. */
    OPT("num_expert_group", 1, 1, M, &cfg->num_expert_group);
    if (cfg->num_expert_group != 1)
        return err_unsupported(c, "num_expert_group", cJSON_GetObjectItemCaseSensitive(root, "num_expert_group"),
                               "only 1 expert group is implemented");
    OPT("topk_group", 1, 1, M, &cfg->topk_group);
    if (cfg->topk_group != 1)
        return err_unsupported(c, "topk_group", cJSON_GetObjectItemCaseSensitive(root, "topk_group"),
                               "only 1 expert group is implemented");
    if ((rc = get_only_string(c, root, "moe_router_activation_func", "sigmoid",
                              "the router scores with sigmoid only")) != VT_OK)
        return rc;
    return get_only_string(c, root, "hidden_act", "silu", "the MLPs and experts use SiLU only");
}
#undef REQ
#undef OPT

/* Informational fields: the checkpoint's dtype name and the special tokens. */
static int parse_info(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    const char *dkey = cJSON_GetObjectItemCaseSensitive(root, "dtype") ? "dtype" : "torch_dtype";
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, dkey);
    cfg->dtype[0] = '\0';
    if (dt && !cJSON_IsNull(dt)) {
        if (!cJSON_IsString(dt) || !dt->valuestring || strlen(dt->valuestring) >= sizeof cfg->dtype)
            return err_type(c, dkey, "a dtype name such as \"bfloat16\"", dt);
        snprintf(cfg->dtype, sizeof cfg->dtype, "%s", dt->valuestring);
    }
    if ((rc = get_int(c, root, "", "bos_token_id", 0, 1, -1, 0, INT64_MAX, &cfg->bos_token_id)) != VT_OK) return rc;
    return get_int(c, root, "", "eos_token_id", 0, 1, -1, 0, INT64_MAX, &cfg->eos_token_id);
}

static int parse_object(pctx *c, const cJSON *root, vt_config *cfg) {
    int rc;
    if ((rc = parse_model(c, root, cfg)) != VT_OK || (rc = parse_mla(c, root, cfg)) != VT_OK ||
        (rc = parse_kda(c, root, cfg)) != VT_OK || (rc = parse_moe(c, root, cfg)) != VT_OK ||
        (rc = parse_info(c, root, cfg)) != VT_OK)
        return rc;
    return check_bounds(cfg, c->fname, c->err);
}

int vt_config_parse(const char *json, size_t len, const char *fname, vt_config *cfg, vt_err *err) {
    if (!fname) fname = "config";
    if (!json || !cfg) return vt_errf(err, VT_EINTERNAL, "%s: vt_config_parse: NULL argument", fname);
    memset(cfg, 0, sizeof *cfg);
    pctx c = {fname, err};

    /* NUL bytes and \u0000 escapes: cJSON would cut a string (dtype, a
     * router function name) short at them and accept what is left */
    int rc0 = vt_json_check_text(json, len, fname, err);
    if (rc0 != VT_OK) return rc0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = (end && end >= json && end <= json + len) ? (size_t)(end - json) : 0;
        return vt_errf(err, VT_EINPUT, "%s: not valid JSON (parse error near byte %zu)", fname, at);
    }
    /* cJSON stops at the end of the first value; anything after it but
     * whitespace means the file is not one JSON document. */
    size_t at = (size_t)(end - json);
    while (at < len && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) at++;
    int rc;
    if (at < len) {
        rc = vt_errf(err, VT_EINPUT, "%s: not valid JSON (unexpected data after the object at byte %zu)", fname, at);
    } else if (!cJSON_IsObject(root)) {
        rc = vt_errf(err, VT_EINPUT, "%s: expected a JSON object at the top level", fname);
    } else {
        rc = parse_object(&c, root, cfg);
    }
    cJSON_Delete(root);
    if (rc != VT_OK) memset(cfg, 0, sizeof *cfg);
    return rc;
}

int vt_config_load(const char *path, vt_config *cfg, vt_err *err) {
    if (!path || !cfg) return vt_errf(err, VT_EINTERNAL, "vt_config_load: NULL argument");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        /* A path that does not name a file is the user's input, not a failing system. */
        int e = errno;
        int code = (e == ENOENT || e == ENOTDIR || e == EACCES) ? VT_EINPUT : VT_EIO;
        return vt_errf(err, code, "%s: cannot open config: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return vt_errf(err, VT_EIO, "%s: cannot stat config: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return vt_errf(err, VT_EINPUT, "%s: config is not a regular file (%s)", path,
                       S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket");
    }
    if ((uint64_t)st.st_size > CFG_MAX_FILE_BYTES) {
        close(fd);
        return vt_errf(err, VT_EINPUT, "%s: config is %lld bytes, more than the limit of %zu", path,
                       (long long)st.st_size, CFG_MAX_FILE_BYTES);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return vt_errf(err, VT_ENOMEM, "%s: out of memory reading config (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return vt_errf(err, VT_EIO, "%s: cannot read config: %s", path, strerror(e));
        }
        if (r == 0) break;   /* the file shrank: parse what is there */
        got += (size_t)r;
    }
    close(fd);
    int rc = vt_config_parse(buf, got, path, cfg, err);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ layer kinds */

/* As in vLLM's and transformers' kimi_linear: the first first_k_dense_replace
 * layers are dense, then every moe_layer_freq-th layer (by absolute index)
 * is MoE. */
int vt_config_layer_is_moe(const vt_config *cfg, int64_t i) {
    if (!cfg || i < 0 || i >= cfg->num_hidden_layers || cfg->moe_layer_freq < 1) return 0;
    return i >= cfg->first_k_dense_replace && i % cfg->moe_layer_freq == 0;
}

int64_t vt_config_n_moe_layers(const vt_config *cfg) {
    int64_t n = 0;
    if (!cfg) return 0;
    for (int64_t i = 0; i < cfg->num_hidden_layers && i < VT_MAX_LAYERS; i++) n += vt_config_layer_is_moe(cfg, i);
    return n;
}

/* ----------------------------------------------------------- tensor specs */

int vt_config_tensor_specs(const vt_config *cfg, vt_tensor_spec **out, size_t *n, vt_err *err) {
    if (!cfg || !out || !n) return vt_errf(err, VT_EINTERNAL, "vt_config_tensor_specs: NULL argument");
    *out = NULL;
    *n = 0;
    int rc = check_bounds(cfg, "config", err);
    if (rc != VT_OK) return rc;
    emitter count = {0};
    emit_all(cfg, &count);
    size_t bytes;
    if (vt_size_mul(count.n, sizeof(vt_tensor_spec), &bytes) != 0)
        return vt_errf(err, VT_EINTERNAL, "config: %zu tensor specs overflow size_t", count.n);
    emitter fill = {.out = malloc(bytes)};
    if (!fill.out) return vt_errf(err, VT_ENOMEM, "config: out of memory for %zu tensor specs", count.n);
    emit_all(cfg, &fill);
    if (fill.n != count.n || fill.bad_name) {
        free(fill.out);
        return vt_errf(err, VT_EINTERNAL, "config: tensor list inconsistent (%zu vs %zu specs, name overflow %d)",
                       fill.n, count.n, fill.bad_name);
    }
    *out = fill.out;
    *n = fill.n;
    return VT_OK;
}

/* -------------------------------------------------------- checkpoint check */

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int d = 0; d < ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The file to name in a message: the tensor's own file, or, for a tensor that
 * is not there (or the checkpoint as a whole), what lists the tensors. */
static const char *file_of(const vt_ckpt *ck, const vt_st_entry *e) {
    const char *f = e ? vt_ckpt_file_name(ck, e->file) : vt_ckpt_source(ck);
    return f ? f : "checkpoint";
}

/* Checks every expected tensor (presence, shape, dtype) and then looks for
 * tensors the config does not explain. The first problem in canonical order
 * is reported in full; the message counts the rest, so a config/checkpoint
 * mismatch shows its scale ("and 41 more problems") in one line. */
int vt_ckpt_validate(const vt_config *cfg, const vt_ckpt *ck, vt_err *err) {
    if (!cfg || !ck) return vt_errf(err, VT_EINTERNAL, "vt_ckpt_validate: NULL argument");
    vt_tensor_spec *specs = NULL;
    size_t ns = 0;
    int rc = vt_config_tensor_specs(cfg, &specs, &ns, err);
    if (rc != VT_OK) return rc;

    size_t problems = 0;
    char first[sizeof err->msg];
    first[0] = '\0';
    for (size_t i = 0; i < ns; i++) {
        const vt_tensor_spec *s = &specs[i];
        const vt_st_entry *e = vt_ckpt_find(ck, s->name);
        char msg[sizeof err->msg];
        msg[0] = '\0';
        if (!e) {
            snprintf(msg, sizeof msg, "%s: tensor %s: missing", file_of(ck, NULL), s->name);
        } else {
            int same = e->ndim == s->ndim;
            for (int d = 0; same && d < s->ndim; d++) same = e->shape[d] == s->shape[d];
            if (!same) {
                char got[160], want[160];
                fmt_shape(got, sizeof got, e->ndim, e->shape);
                fmt_shape(want, sizeof want, s->ndim, s->shape);
                snprintf(msg, sizeof msg, "%s: tensor %s: shape %s, expected %s", file_of(ck, e), s->name, got, want);
            } else if (e->dtype != VT_F32 && e->dtype != VT_BF16 && e->dtype != VT_F16) {
                const vt_dtype_traits *t = vt_dtype_traits_of(e->dtype);
                snprintf(msg, sizeof msg, "%s: tensor %s: dtype %s, expected F32, BF16 or F16", file_of(ck, e),
                         s->name, t ? t->st_name : "?");
            }
        }
        if (msg[0]) {
            if (problems++ == 0) memcpy(first, msg, sizeof first);
        }
    }

    /* Extras: every checkpoint name not among the specs, by binary search in
     * the sorted spec names. */
    const char **names = malloc((ns ? ns : 1) * sizeof *names);
    if (!names) {
        free(specs);
        return vt_errf(err, VT_ENOMEM, "%s: out of memory checking tensor names", file_of(ck, NULL));
    }
    for (size_t i = 0; i < ns; i++) names[i] = specs[i].name;
    qsort(names, ns, sizeof *names, cmp_name_ptr);
    size_t n_extra = 0;
    char extras[512];
    extras[0] = '\0';
    const char *extra_file = NULL;
    size_t nck = vt_ckpt_count(ck);
    for (size_t i = 0; i < nck; i++) {
        const vt_st_entry *e = vt_ckpt_entry(ck, i);
        if (!e || !e->name) continue;
        const char *key = e->name;
        if (bsearch(&key, names, ns, sizeof *names, cmp_name_ptr)) continue;
        if (n_extra == 0) extra_file = file_of(ck, e);
        if (n_extra < 4) {
            size_t o = strlen(extras);
            char shown[192];
            snprintf(extras + o, sizeof extras - o, "%s%s", n_extra ? ", " : "", vt_st_show_name(e->name, shown, sizeof shown));
        }
        n_extra++;
    }
    free(names);
    free(specs);
    if (n_extra > 0) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s: %zu unexpected tensor%s not in the config: %s%s", extra_file, n_extra,
                 n_extra == 1 ? "" : "s", extras, n_extra > 4 ? ", ..." : "");
        if (problems++ == 0) memcpy(first, msg, sizeof first);
    }

    if (problems == 0) return VT_OK;
    if (problems == 1) return vt_errf(err, VT_EINPUT, "%s", first);
    return vt_errf(err, VT_EINPUT, "%s (and %zu more problem%s)", first, problems - 1, problems == 2 ? "" : "s");
}
