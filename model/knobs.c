/*
 * knobs.c — the knob registry, knob sets and the fault registry.
 *
 * A knob is declared exactly once, in KNOBS below: its name, type, default,
 * allowed values, one line of documentation and whether it changes the model's
 * numbers. Everything else is derived from this table: parsing from the
 * environment, the did-you-mean for a misspelt VT_* variable, `vtlab knobs`,
 * docs/knobs.md, and the canonical hash that goes into a run's identity.
 *
 * Why unknown VT_* variables are errors: a knob that silently does nothing is
 * exactly how an experiment measures something other than what it claims.
 * `VT_KIMI_BF16_STRAEM=1` must stop the run, not run the f32 arm under a bf16
 * label.
 */
#include "knobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define FAULT_NONE_NAME "none"
#define LAYERS_ALLOWED "all|none|LAYERS (0-3,7 5.ffn 2-4.attn)"
/* A knob's canonical text: a layer set's can be long (vtprobe.h). */
#define KNOB_VALUE_MAX VTP_LAYER_SET_TEXT

static const vt_fault_info FAULTS[] = {
    {FAULT_NONE_NAME, "", "no fault"},
    {"moe_scatter_row_bytes_from_stream", "moe.scatter",
     "the MoE scatter sizes rows from the residual-stream dtype while copying f32 buffers "
     "(with a bf16 stream: half length, half stride, every MoE layer), as in the defect report"},
};
#define N_FAULTS ((int)(sizeof FAULTS / sizeof FAULTS[0]))

static const vt_knob_info KNOBS[VT_K_COUNT] = {
    [VT_K_BF16_STREAM] = {"VT_KIMI_BF16_STREAM", VT_KNOB_BOOL, "0", "0|1",
     "residual stream stored in bf16 between sublayers (expert buffers stay f32)", 1, 0,
     "VT_KIMI_BF16_STREAM_LAYERS", "sites"},
    [VT_K_BF16_EXPERT_OUT] = {"VT_KIMI_BF16_EXPERT_OUT", VT_KNOB_BOOL, "0", "0|1",
     "expert output y and expert_out follow the residual-stream dtype (the report's second fix shape)", 1, 0,
     "VT_KIMI_BF16_EXPERT_OUT_LAYERS", "sites"},
    [VT_K_BF16_ACT] = {"VT_KIMI_BF16_ACT", VT_KNOB_BOOL, "0", "0|1",
     "round to bf16 where the public bf16 implementations do: linear outputs, conv, KDA core, gated norm, experts, residual adds", 1, 0,
     "VT_KIMI_BF16_ACT_LAYERS", "sites"},
    [VT_K_ROUTER_WEIGHTS] = {"VT_KIMI_ROUTER_WEIGHTS", VT_KNOB_ENUM, "unbiased", "unbiased|biased",
     "MoE weights from the unbiased sigmoid scores (transformers, vLLM) or the bias-corrected ones (Moonshot remote code)", 1, 0},
    [VT_K_ROUTER_RENORM] = {"VT_KIMI_ROUTER_RENORM", VT_KNOB_ENUM, "moonshot", "moonshot|always",
     "with moe_renormalize: renormalise the routed weights only when top-k > 1 (Moonshot's original gate) "
     "or for every top-k, top-1 included (the transformers port)", 1, 1},
    [VT_K_MLA_KV_NORM_EPS] = {"VT_KIMI_MLA_KV_NORM_EPS", VT_KNOB_ENUM, "transformers", "transformers|config",
     "eps of the MLA kv_a_layernorm: 1e-6 (transformers, Moonshot) or rms_norm_eps from config.json (vLLM)", 1, 0},
    [VT_K_BACKEND] = {"VT_BACKEND", VT_KNOB_ENUM, "cpu", "cpu|cuda",
     "compute backend: our AVX-512 or AVX2 kernels (gemm.c) on the CPU, or cuBLAS on an NVIDIA GPU", 1, 0},
    [VT_K_FAULT] = {"VT_FAULT", VT_KNOB_ENUM, FAULT_NONE_NAME, "none|moe_scatter_row_bytes_from_stream",
     "replay a registered defect (see `vtlab faults`); none in normal runs", 1, 0},
    [VT_K_THREADS] = {"VT_THREADS", VT_KNOB_INT, "0", "0..1024",
     "CPU threads (OpenMP); 0 = all cores, or fewer under a cgroup CPU quota (results do not depend on it)", 0, 0},
    [VT_K_PROBE] = {"VT_PROBE", VT_KNOB_ENUM, "off", "off|on|audit",
     "runtime dtype probes: off, on (record every site), audit (also sentinel-fill and check every copy destination)", 0, 0},
    [VT_K_TEST_IGNORED] = {"VT_TEST_IGNORED_KNOB", VT_KNOB_BOOL, "0", "0|1",
     "test-only: declared but read by no code path (the fixture for audit rule R3, a knob that never takes effect)", 1, 0},
    /* Scopes (docs/localize.md): where a lever acts, by layer and site. Each
     * layer has two sites, its attention block (L.attn: input norm through
     * the attention's residual add) and its FFN block (L.ffn: norm through
     * the FFN's add); what runs outside every layer belongs to a layer's
     * site, so that every site of every layer is exactly "all": the
     * embedding to 0.attn, the final norm and the logits to the last
     * layer's ffn. Added after runs were recorded: hashed only away from
     * "all" (an unscoped run keeps its identity). */
    [VT_K_BF16_STREAM_LAYERS] = {"VT_KIMI_BF16_STREAM_LAYERS", VT_KNOB_LAYERS, "all", LAYERS_ALLOWED,
     "the scope of VT_KIMI_BF16_STREAM (docs/localize.md), a layer set: all (the lever unscoped), none, or layers "
     "and ranges joined by ',' such as 0-3,7, each optionally .attn or .ffn (that site of the layer only), checked "
     "against the model when a run starts; an arm may write it \"scope\": {\"VT_KIMI_BF16_STREAM\": \"0-3,7\"}. "
     "The stream stores in bf16 are those made at these sites (L.attn: after the "
     "attention add, and layer 0's embedding; L.ffn: after the FFN add); the others stay f32, and the residual.stream "
     "probe of layer L shows the dtype of its L.ffn store", 1, 1},
    [VT_K_BF16_EXPERT_OUT_LAYERS] = {"VT_KIMI_BF16_EXPERT_OUT_LAYERS", VT_KNOB_LAYERS, "all", LAYERS_ALLOWED,
     "the scope of VT_KIMI_BF16_EXPERT_OUT (a layer set, as for VT_KIMI_BF16_STREAM_LAYERS): the MoE layers whose "
     "FFN site is in the set convert y and expert_out to the stream dtype of that site (an attention site holds no "
     "expert output)", 1, 1},
    [VT_K_BF16_ACT_LAYERS] = {"VT_KIMI_BF16_ACT_LAYERS", VT_KNOB_LAYERS, "all", LAYERS_ALLOWED,
     "the scope of VT_KIMI_BF16_ACT (a layer set, as for VT_KIMI_BF16_STREAM_LAYERS): its roundings happen at these "
     "sites only (L.attn: input norm, attention, its add, and layer 0's embedding; L.ffn: norm, MLP or experts, its "
     "add, and the last layer's final norm)", 1, 1},
    [VT_K_TEST_LOSSY_LAYERS] = {"VT_TEST_LOSSY_LAYERS", VT_KNOB_LAYERS, "none", LAYERS_ALLOWED,
     "test-only: a planted per-site fault; at these sites the roundings the bf16 levers make keep one mantissa "
     "bit instead of bf16's 7 (where no lever acts it does nothing)", 1, 1},
};
#define N_KNOBS ((int)VT_K_COUNT)
_Static_assert(sizeof KNOBS / sizeof KNOBS[0] == VT_K_COUNT, "one registry entry per vt_knob_id");

int vt_knob_count(void) { return N_KNOBS; }
const vt_knob_info *vt_knob_at(int i) { return i >= 0 && i < N_KNOBS ? &KNOBS[i] : NULL; }

static int knob_index(const char *name) {
    for (int i = 0; i < N_KNOBS; i++)
        if (strcmp(KNOBS[i].name, name) == 0) return i;
    return -1;
}

const vt_knob_info *vt_knob_find(const char *name) { return vt_knob_at(knob_index(name)); }

const vt_knob_info *vt_knob_scope_of(const char *name) {
    for (int i = 0; i < N_KNOBS; i++)
        if (KNOBS[i].scope && !strcmp(KNOBS[i].scope, name)) return &KNOBS[i];
    return NULL;
}

int vt_fault_count(void) { return N_FAULTS - 1; }
const vt_fault_info *vt_fault_at(int i) { return i >= 0 && i < N_FAULTS - 1 ? &FAULTS[i + 1] : NULL; }

struct vt_knobset {
    char value[N_KNOBS][KNOB_VALUE_MAX];   /* canonical text of each knob's value, by registry index */
};

int vt_knobset_new(vt_knobset **out) {
    vt_knobset *ks = calloc(1, sizeof *ks);
    if (!ks) return VT_STATUS_NOMEM;
    for (int i = 0; i < N_KNOBS; i++) snprintf(ks->value[i], sizeof ks->value[i], "%s", KNOBS[i].def);
    *out = ks;
    return VT_STATUS_OK;
}

void vt_knobset_free(vt_knobset *ks) { free(ks); }

int vt_knobset_copy(vt_knobset **out, const vt_knobset *src) {
    vt_knobset *ks = malloc(sizeof *ks);
    if (!ks) return VT_STATUS_NOMEM;
    memcpy(ks, src, sizeof *ks);
    *out = ks;
    return VT_STATUS_OK;
}

/* An unknown knob, with the declared one it may be a misspelling of
 * (suggest.c judges what is close enough). */
static int unknown_knob(const char *name, char *err, size_t errlen) {
    vt_suggester sg;
    vt_suggest_init(&sg, name);
    for (int i = 0; i < N_KNOBS; i++) vt_suggest_offer(&sg, KNOBS[i].name);
    if (sg.best)
        snprintf(err, errlen, "unknown knob %s (did you mean %s?); `vtlab knobs` lists them", name, sg.best);
    else
        snprintf(err, errlen, "unknown knob %s; `vtlab knobs` lists the declared knobs", name);
    return VT_STATUS_INPUT;
}

/* Is value one of the '|'-separated words of list? */
static int in_list(const char *value, const char *list) {
    size_t n = strlen(value);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

/* A bool knob is 0 or 1, as documented (docs/knobs.md, `vtlab knobs`), and
 * nothing else: "yes", "true", "on" ran as 1 and "no", "false", "off" (and
 * "") as 0 while "Yes" was refused, which no reference said. A spelling
 * that means one of them is named in the error. */
static int bool_error(const char *name, const char *value, char *err, size_t errlen) {
    static const char *const yes[] = {"yes", "true", "on", NULL}, *const no[] = {"no", "false", "off", NULL};
    const char *meant = NULL;
    for (int i = 0; !meant && yes[i]; i++) if (!strcasecmp(value, yes[i])) meant = "1";
    for (int i = 0; !meant && no[i]; i++) if (!strcasecmp(value, no[i])) meant = "0";
    if (meant)
        snprintf(err, errlen, "knob %s: value \"%s\", expected 0 or 1 (did you mean %s?)", name, value, meant);
    else snprintf(err, errlen, "knob %s: value \"%s\", expected 0 or 1", name, value);
    return VT_STATUS_INPUT;
}

/* A layer set's canonical text into canon (KNOB_VALUE_MAX bytes); the
 * layers are bounded by the model when a session is made (vt_session_new). */
static int layers_value(const vt_knob_info *k, const char *value, char *canon, char *err, size_t errlen) {
    vtp_layer_set set;
    char why[400];
    if (vtp_layer_set_parse(value, 0, 1, &set, why, sizeof why)) {
        snprintf(err, errlen, "knob %s: value \"%.80s\": %s", k->name, value, why);
        return -1;
    }
    return vtp_layer_set_format(&set, canon, KNOB_VALUE_MAX);
}

int vt_knobset_set(vt_knobset *ks, const char *name, const char *value, char *err, size_t errlen) {
    int i = knob_index(name);
    if (i < 0) return unknown_knob(name, err, errlen);
    const vt_knob_info *k = &KNOBS[i];
    char canon[KNOB_VALUE_MAX];
    switch (k->type) {
    case VT_KNOB_BOOL:
        if (!strcmp(value, "0") || !strcmp(value, "1")) {
            snprintf(canon, sizeof canon, "%s", value);
            break;
        }
        return bool_error(name, value, err, errlen);
    case VT_KNOB_ENUM:
        if (!in_list(value, k->allowed)) {
            char meant[KNOB_VALUE_MAX];
            if (vt_suggest_list(value, k->allowed, meant, sizeof meant))
                snprintf(err, errlen, "knob %s: value \"%s\", expected one of %s (did you mean %s?)", name, value,
                         k->allowed, meant);
            else snprintf(err, errlen, "knob %s: value \"%s\", expected one of %s", name, value, k->allowed);
            return VT_STATUS_INPUT;
        }
        snprintf(canon, sizeof canon, "%s", value);
        break;
    case VT_KNOB_LAYERS:
        if (layers_value(k, value, canon, err, errlen)) return VT_STATUS_INPUT;
        break;
    case VT_KNOB_INT: {
        char *end = NULL;
        long v = strtol(value, &end, 10), lo = 0, hi = 1024;
        sscanf(k->allowed, "%ld..%ld", &lo, &hi);
        if (!*value || *end || v < lo || v > hi) {
            snprintf(err, errlen, "knob %s: value \"%s\", expected an integer in %s", name, value, k->allowed);
            return VT_STATUS_INPUT;
        }
        snprintf(canon, sizeof canon, "%ld", v);
        break;
    }
    default:
        snprintf(canon, sizeof canon, "%s", value);
    }
    snprintf(ks->value[i], sizeof ks->value[i], "%s", canon);
    return VT_STATUS_OK;
}

int vt_knobset_from_env(vt_knobset *ks, char *const *envp, char *err, size_t errlen) {
    for (; envp && *envp; envp++) {
        const char *kv = *envp;
        if (strncmp(kv, "VT_", 3) != 0) continue;
        const char *eq = strchr(kv, '=');
        if (!eq) continue;
        if (eq - kv >= 64) {   /* longer than any knob: unknown, not ignored */
            snprintf(err, errlen, "unknown knob %.60s... (no knob has so long a name); `vtlab knobs` lists them", kv);
            return VT_STATUS_INPUT;
        }
        char name[64];
        memcpy(name, kv, (size_t)(eq - kv));
        name[eq - kv] = '\0';
        int rc = vt_knobset_set(ks, name, eq + 1, err, errlen);
        if (rc) return rc;
    }
    return VT_STATUS_OK;
}

const char *vt_knobset_get(const vt_knobset *ks, const char *name) {
    int i = knob_index(name);
    return i < 0 ? NULL : ks->value[i];
}

void vt_knobset_hash(const vt_knobset *ks, char out[65]) {
    /* Registry order is fixed, but sort by name anyway so that reordering the
     * table never changes a recorded hash. */
    int idx[N_KNOBS];
    for (int i = 0; i < N_KNOBS; i++) idx[i] = i;
    for (int i = 1; i < N_KNOBS; i++)
        for (int j = i; j > 0 && strcmp(KNOBS[idx[j - 1]].name, KNOBS[idx[j]].name) > 0; j--) {
            int t = idx[j]; idx[j] = idx[j - 1]; idx[j - 1] = t;
        }
    vt_sha256_ctx c;
    vt_sha256_init(&c);
    for (int n = 0; n < N_KNOBS; n++) {
        int i = idx[n];
        if (!KNOBS[i].numeric) continue;
        if (KNOBS[i].hash_omits_default && !strcmp(ks->value[i], KNOBS[i].def)) continue;
        vt_sha256_update(&c, KNOBS[i].name, strlen(KNOBS[i].name));
        vt_sha256_update(&c, "=", 1);
        vt_sha256_update(&c, ks->value[i], strlen(ks->value[i]));
        vt_sha256_update(&c, "\n", 1);
    }
    vt_sha256_final_hex(&c, out);
}

const char *vt_knobset_value(const vt_knobset *ks, vt_knob_id id) { return ks->value[id]; }

void vt_knobs_resolve(const vt_knobset *ks, vt_knobs *k) {
    memset(k, 0, sizeof *k);
#define KV(id) vt_knobset_value(ks, id)
    k->bf16_stream = !strcmp(KV(VT_K_BF16_STREAM), "1");
    k->bf16_expert_out = !strcmp(KV(VT_K_BF16_EXPERT_OUT), "1");
    k->bf16_act = !strcmp(KV(VT_K_BF16_ACT), "1");
    k->router_biased = !strcmp(KV(VT_K_ROUTER_WEIGHTS), "biased");
    k->kv_norm_eps_config = !strcmp(KV(VT_K_MLA_KV_NORM_EPS), "config");
    k->router_renorm_always = !strcmp(KV(VT_K_ROUTER_RENORM), "always");
    k->threads = atoi(KV(VT_K_THREADS));
    k->backend = !strcmp(KV(VT_K_BACKEND), "cuda") ? VT_BACKEND_CUDA : VT_BACKEND_CPU;
    const char *p = KV(VT_K_PROBE);
    k->probe = !strcmp(p, "audit") ? VT_PROBE_AUDIT : !strcmp(p, "on") ? VT_PROBE_ON : VT_PROBE_OFF;
    const char *f = KV(VT_K_FAULT);
#undef KV
    k->fault = VT_FAULT_NONE;
    for (int i = 1; i < N_FAULTS; i++)
        if (!strcmp(f, FAULTS[i].name)) k->fault = (vt_fault_id)i;
    k->test_ignored = 0;   /* deliberately never read from the set: see the knob's doc */
    /* syntax checked when set; the model's layer count bounds them later (vt_knobs_check_layers) */
    vtp_layer_set_parse(vt_knobset_value(ks, VT_K_BF16_STREAM_LAYERS), 0, 1, &k->stream_scope, NULL, 0);
    vtp_layer_set_parse(vt_knobset_value(ks, VT_K_BF16_EXPERT_OUT_LAYERS), 0, 1, &k->expert_scope, NULL, 0);
    vtp_layer_set_parse(vt_knobset_value(ks, VT_K_BF16_ACT_LAYERS), 0, 1, &k->act_scope, NULL, 0);
    vtp_layer_set_parse(vt_knobset_value(ks, VT_K_TEST_LOSSY_LAYERS), 0, 1, &k->lossy, NULL, 0);
    /* one bit: alone at any one layer of the tiny model, the bf16 stream's
     * top-1 agreement drops from 247/256 to 143-190/256 (test_localize.sh) */
    k->lossy_bits = 1;
}

int vt_knobs_check_layers(const vt_knobset *ks, int64_t n_layers, char *err, size_t errlen) {
    static const vt_knob_id ids[] = {VT_K_BF16_STREAM_LAYERS, VT_K_BF16_EXPERT_OUT_LAYERS, VT_K_BF16_ACT_LAYERS,
                                     VT_K_TEST_LOSSY_LAYERS};
    for (size_t j = 0; j < sizeof ids / sizeof ids[0]; j++) {
        vtp_layer_set set;
        char why[400];
        const char *v = vt_knobset_value(ks, ids[j]);
        if (vtp_layer_set_parse(v, (int)n_layers, 1, &set, why, sizeof why)) {
            snprintf(err, errlen, "knob %s=%.80s: %s", KNOBS[ids[j]].name, v, why);
            return VT_STATUS_INPUT;
        }
    }
    return VT_STATUS_OK;
}

int vt_knobs_scoped(const vt_knobset *ks) {
    return strcmp(vt_knobset_value(ks, VT_K_BF16_STREAM_LAYERS), "all") ||
           strcmp(vt_knobset_value(ks, VT_K_BF16_EXPERT_OUT_LAYERS), "all") ||
           strcmp(vt_knobset_value(ks, VT_K_BF16_ACT_LAYERS), "all") ||
           strcmp(vt_knobset_value(ks, VT_K_TEST_LOSSY_LAYERS), "none");
}
