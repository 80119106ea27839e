/*
 * test_config.c — the config parser, the tensor list, and the checkpoint check.
 *
 * Why these tests. A config error that slips through yields a model that runs
 * and is wrong, so each refusal the parser promises is exercised with its own
 * malformed variant of the shipped tiny config, and each message is checked
 * for the file, the field and the reason (the CLI turns these into exit 2 and
 * the user reads them). The shipped configs are parsed for real, including the
 * 48B one whose MoE layer count (26) the defect report depends on. The
 * checkpoint check is run against small checkpoints written with the
 * safetensors writer: one good, and one per defect it must catch.
 *
 * Run from the repository root (paths are relative to it).
 */
#include "tests/unit/vt_test.h"

#include <cjson/cJSON.h>
#include <unistd.h>

#include "model/config.h"

#define TINY  "model/configs/kimi-linear-tiny.json"
#define SMALL "model/configs/kimi-linear-small.json"
#define BIG   "model/configs/kimi-linear-48b-a3b.json"

/* ------------------------------------------------------------- helpers */

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static cJSON *load_json(const char *path) {
    char *t = read_text(path, NULL);
    cJSON *j = cJSON_Parse(t);
    free(t);
    assert_non_null(j);
    return j;
}

/* Sets (or with value_json NULL deletes) the member at a dotted path such as
 * "linear_attn_config.kda_layers". */
static void edit(cJSON *root, const char *path, const char *value_json) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    cJSON *obj = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.')) != NULL) {
        *dot = '\0';
        obj = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!obj) fail_msg("edit: no object %s in %s", key, path);
        key = dot + 1;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
    if (value_json) {
        cJSON *v = cJSON_Parse(value_json);
        if (!v) fail_msg("edit: bad JSON for %s: %s", path, value_json);
        cJSON_AddItemToObject(obj, key, v);
    }
}

/* Parses JSON text from an exactly sized heap copy (no NUL after it), so that
 * AddressSanitizer catches any read past len. */
static int parse_exact(const char *text, size_t len, const char *fname, vt_config *cfg, vt_err *err) {
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    int rc = vt_config_parse(copy, len, fname, cfg, err);
    free(copy);
    return rc;
}

static int parse_json(const cJSON *root, const char *fname, vt_config *cfg, vt_err *err) {
    char *t = cJSON_PrintUnformatted(root);
    assert_non_null(t);
    int rc = parse_exact(t, strlen(t), fname, cfg, err);
    free(t);
    return rc;
}

static const vt_tensor_spec *find_spec(const vt_tensor_spec *s, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0) return &s[i];
    fail_msg("no tensor spec named %s", name);
    return NULL;
}

static void check_spec(const vt_tensor_spec *s, size_t n, const char *name, vt_tensor_role role, int f32_only,
                       int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const vt_tensor_spec *t = find_spec(s, n, name);
    const int64_t want[4] = {d0, d1, d2, d3};
    if (t->ndim != ndim) fail_msg("%s: ndim %d, expected %d", name, t->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != want[d])
            fail_msg("%s: dim %d is %lld, expected %lld", name, d, (long long)t->shape[d], (long long)want[d]);
    if ((int)t->role != (int)role) fail_msg("%s: role %d, expected %d", name, (int)t->role, (int)role);
    if (t->f32_only != f32_only) fail_msg("%s: f32_only %d, expected %d", name, t->f32_only, f32_only);
}

/* ------------------------------------------------- the shipped configs */

static void test_parse_tiny(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(vt_config_load(TINY, &c, &err), err);
    assert_int_equal(c.vocab_size, 1024);
    assert_int_equal(c.hidden_size, 192);
    assert_int_equal(c.num_hidden_layers, 8);
    assert_int_equal(c.intermediate_size, 384);
    assert_true(c.rms_norm_eps == 1e-5);
    assert_int_equal(c.num_attention_heads, 4);
    assert_int_equal(c.num_key_value_heads, 4);
    assert_int_equal(c.kv_lora_rank, 64);
    assert_int_equal(c.qk_nope_head_dim, 32);
    assert_int_equal(c.qk_rope_head_dim, 16);
    assert_int_equal(c.v_head_dim, 24);
    assert_int_equal(c.mla_use_nope, 1);
    assert_int_equal(c.kda_num_heads, 4);
    assert_int_equal(c.kda_head_dim, 32);
    assert_int_equal(c.short_conv_kernel_size, 4);
    assert_int_equal(c.num_experts, 16);
    assert_int_equal(c.num_experts_per_token, 4);
    assert_int_equal(c.moe_intermediate_size, 96);
    assert_int_equal(c.num_shared_experts, 1);
    assert_int_equal(c.first_k_dense_replace, 1);
    assert_int_equal(c.moe_layer_freq, 1);
    assert_true(c.routed_scaling_factor == 2.446);
    assert_int_equal(c.moe_renormalize, 1);
    assert_int_equal(c.use_grouped_topk, 1);
    assert_int_equal(c.num_expert_group, 1);
    assert_int_equal(c.topk_group, 1);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_string_equal(c.dtype, "float32");
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.eos_token_id, 2);
    for (int i = 0; i < 8; i++)
        assert_int_equal(c.layer_kind[i], (i == 3 || i == 7) ? VT_LAYER_MLA : VT_LAYER_KDA);
    assert_int_equal(c.layer_kind[8], VT_LAYER_NONE);
    assert_int_equal(vt_config_layer_is_moe(&c, 0), 0);
    for (int i = 1; i < 8; i++) assert_int_equal(vt_config_layer_is_moe(&c, i), 1);
    assert_int_equal(vt_config_layer_is_moe(&c, 8), 0);
    assert_int_equal(vt_config_layer_is_moe(&c, -1), 0);
    assert_int_equal(vt_config_n_moe_layers(&c), 7);
}

static void test_parse_small(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(vt_config_load(SMALL, &c, &err), err);
    assert_int_equal(c.vocab_size, 32000);
    assert_int_equal(c.hidden_size, 1024);
    assert_int_equal(c.intermediate_size, 2816);
    assert_int_equal(c.num_experts, 32);
    assert_int_equal(c.num_experts_per_token, 4);
    assert_int_equal(c.kda_head_dim, 128);
    assert_int_equal(c.kv_lora_rank, 256);
    assert_string_equal(c.dtype, "float32");
    assert_int_equal(c.bos_token_id, 31997);
    assert_int_equal(c.layer_kind[3], VT_LAYER_MLA);
    assert_int_equal(c.layer_kind[4], VT_LAYER_KDA);
    assert_int_equal(vt_config_n_moe_layers(&c), 7);
}

static void test_parse_48b(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(vt_config_load(BIG, &c, &err), err);
    assert_int_equal(c.vocab_size, 163840);
    assert_int_equal(c.hidden_size, 2304);
    assert_int_equal(c.num_hidden_layers, 27);
    assert_int_equal(c.intermediate_size, 9216);
    assert_int_equal(c.num_experts, 256);
    assert_int_equal(c.num_experts_per_token, 8);
    assert_int_equal(c.moe_intermediate_size, 1024);
    assert_int_equal(c.kv_lora_rank, 512);
    assert_int_equal(c.qk_rope_head_dim, 64);
    assert_true(c.routed_scaling_factor == 2.446);
    assert_string_equal(c.dtype, "bfloat16");
    assert_int_equal(c.bos_token_id, 163584);
    assert_int_equal(c.eos_token_id, 163586);
    /* MLA at 1-based 4, 8, ..., 24 and 27; KDA elsewhere. */
    for (int i = 0; i < 27; i++) {
        int one_based = i + 1;
        int mla = (one_based % 4 == 0) || one_based == 27;
        if (c.layer_kind[i] != (mla ? VT_LAYER_MLA : VT_LAYER_KDA))
            fail_msg("layer %d (1-based): kind %d", one_based, (int)c.layer_kind[i]);
    }
    assert_int_equal(vt_config_n_moe_layers(&c), 26);
    assert_int_equal(vt_config_layer_is_moe(&c, 0), 0);
    assert_int_equal(vt_config_layer_is_moe(&c, 26), 1);

    vt_tensor_spec *s = NULL;
    size_t n = 0;
    VT_ASSERT_OK(vt_config_tensor_specs(&c, &s, &n, &err), err);
    /* 1 embed + 27x2 norms + 20 KDA x15 + 7 MLA x5 + 1 dense x3 + 26 MoE x(2 + 256x3 + 3) + 2 */
    assert_int_equal(n, 1 + 54 + 300 + 35 + 3 + 26 * (2 + 768 + 3) + 2);
    check_spec(s, n, "model.layers.26.block_sparse_moe.experts.255.w2.weight", VT_ROLE_LINEAR, 0, 2, 2304, 1024, 0, 0);
    check_spec(s, n, "model.layers.26.self_attn.kv_b_proj.weight", VT_ROLE_LINEAR, 0, 2, 32 * 256, 512, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.A_log", VT_ROLE_A_LOG, 1, 4, 1, 1, 32, 1);
    free(s);
}

/* ------------------------------------------------------ tensor specs */

static void test_specs_tiny(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(vt_config_load(TINY, &c, &err), err);
    vt_tensor_spec *s = NULL;
    size_t n = 0;
    VT_ASSERT_OK(vt_config_tensor_specs(&c, &s, &n, &err), err);
    /* 1 embed + 8x2 norms + 6 KDA x15 + 2 MLA x5 + dense x3 + 7 MoE x(2 + 16x3 + 3) + 2 */
    assert_int_equal(n, 493);

    /* canonical order: embedding first, norm and lm_head last */
    assert_string_equal(s[0].name, "model.embed_tokens.weight");
    assert_string_equal(s[1].name, "model.layers.0.input_layernorm.weight");
    assert_string_equal(s[2].name, "model.layers.0.self_attn.q_proj.weight");
    assert_string_equal(s[n - 2].name, "model.norm.weight");
    assert_string_equal(s[n - 1].name, "lm_head.weight");

    check_spec(s, n, "model.embed_tokens.weight", VT_ROLE_EMBED, 0, 2, 1024, 192, 0, 0);
    check_spec(s, n, "lm_head.weight", VT_ROLE_LM_HEAD, 0, 2, 1024, 192, 0, 0);
    check_spec(s, n, "model.norm.weight", VT_ROLE_NORM, 0, 1, 192, 0, 0, 0);
    /* KDA layer 0: P = 4 x 32 = 128, d = 32, H = 4 */
    check_spec(s, n, "model.layers.0.self_attn.k_proj.weight", VT_ROLE_LINEAR, 0, 2, 128, 192, 0, 0);
    check_spec(s, n, "model.layers.2.self_attn.q_conv1d.weight", VT_ROLE_CONV, 0, 3, 128, 1, 4, 0);
    check_spec(s, n, "model.layers.0.self_attn.v_conv1d.weight", VT_ROLE_CONV, 0, 3, 128, 1, 4, 0);
    check_spec(s, n, "model.layers.0.self_attn.A_log", VT_ROLE_A_LOG, 1, 4, 1, 1, 4, 1);
    check_spec(s, n, "model.layers.0.self_attn.dt_bias", VT_ROLE_DT_BIAS, 1, 1, 128, 0, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.f_a_proj.weight", VT_ROLE_LINEAR, 0, 2, 32, 192, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.f_b_proj.weight", VT_ROLE_LINEAR, 0, 2, 128, 32, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.b_proj.weight", VT_ROLE_LINEAR, 0, 2, 4, 192, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.g_a_proj.weight", VT_ROLE_LINEAR, 0, 2, 32, 192, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.g_b_proj.weight", VT_ROLE_LINEAR, 0, 2, 128, 32, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.o_norm.weight", VT_ROLE_NORM, 0, 1, 32, 0, 0, 0);
    check_spec(s, n, "model.layers.0.self_attn.o_proj.weight", VT_ROLE_LINEAR, 0, 2, 192, 128, 0, 0);
    /* dense MLP on layer 0 only */
    check_spec(s, n, "model.layers.0.mlp.gate_proj.weight", VT_ROLE_LINEAR, 0, 2, 384, 192, 0, 0);
    check_spec(s, n, "model.layers.0.mlp.up_proj.weight", VT_ROLE_LINEAR, 0, 2, 384, 192, 0, 0);
    check_spec(s, n, "model.layers.0.mlp.down_proj.weight", VT_ROLE_LINEAR, 0, 2, 192, 384, 0, 0);
    /* MLA layer 3 (1-based 4): Nh 4, nope 32, rope 16, dv 24, r_kv 64 */
    check_spec(s, n, "model.layers.3.self_attn.q_proj.weight", VT_ROLE_LINEAR, 0, 2, 4 * 48, 192, 0, 0);
    check_spec(s, n, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", VT_ROLE_LINEAR, 0, 2, 80, 192, 0, 0);
    check_spec(s, n, "model.layers.3.self_attn.kv_a_layernorm.weight", VT_ROLE_NORM, 0, 1, 64, 0, 0, 0);
    check_spec(s, n, "model.layers.3.self_attn.kv_b_proj.weight", VT_ROLE_LINEAR, 0, 2, 4 * 56, 64, 0, 0);
    check_spec(s, n, "model.layers.7.self_attn.o_proj.weight", VT_ROLE_LINEAR, 0, 2, 192, 4 * 24, 0, 0);
    check_spec(s, n, "model.layers.7.post_attention_layernorm.weight", VT_ROLE_NORM, 0, 1, 192, 0, 0, 0);
    /* MoE */
    check_spec(s, n, "model.layers.1.block_sparse_moe.gate.weight", VT_ROLE_LINEAR, 0, 2, 16, 192, 0, 0);
    check_spec(s, n, "model.layers.1.block_sparse_moe.gate.e_score_correction_bias", VT_ROLE_ROUTER_BIAS, 1, 1, 16,
               0, 0, 0);
    check_spec(s, n, "model.layers.1.block_sparse_moe.experts.7.w2.weight", VT_ROLE_LINEAR, 0, 2, 192, 96, 0, 0);
    check_spec(s, n, "model.layers.7.block_sparse_moe.experts.15.w1.weight", VT_ROLE_LINEAR, 0, 2, 96, 192, 0, 0);
    check_spec(s, n, "model.layers.7.block_sparse_moe.experts.0.w3.weight", VT_ROLE_LINEAR, 0, 2, 96, 192, 0, 0);
    check_spec(s, n, "model.layers.2.block_sparse_moe.shared_experts.gate_proj.weight", VT_ROLE_LINEAR, 0, 2, 96,
               192, 0, 0);
    check_spec(s, n, "model.layers.2.block_sparse_moe.shared_experts.down_proj.weight", VT_ROLE_LINEAR, 0, 2, 192,
               96, 0, 0);

    /* names unique; layer 0 has no MoE, MoE layers no dense MLP; unused dims 0 */
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++)
            if (strcmp(s[i].name, s[j].name) == 0) fail_msg("duplicate spec %s", s[i].name);
        assert_null(strstr(s[i].name, "layers.0.block_sparse_moe"));
        assert_null(strstr(s[i].name, "layers.1.mlp"));
        for (int d = s[i].ndim; d < 4; d++) assert_int_equal(s[i].shape[d], 0);
        assert_true(s[i].ndim >= 1 && s[i].ndim <= 4);
    }
    free(s);
}

static void test_specs_no_shared_experts_and_freq(void **state) {
    (void)state;
    cJSON *j = load_json(TINY);
    edit(j, "num_shared_experts", "0");
    edit(j, "moe_layer_freq", "2");
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(parse_json(j, "t.json", &c, &err), err);
    cJSON_Delete(j);
    /* moe_layer_freq 2 with first_k_dense_replace 1: MoE at 2, 4, 6 */
    for (int i = 0; i < 8; i++) assert_int_equal(vt_config_layer_is_moe(&c, i), i >= 1 && i % 2 == 0);
    assert_int_equal(vt_config_n_moe_layers(&c), 3);
    vt_tensor_spec *s = NULL;
    size_t n = 0;
    VT_ASSERT_OK(vt_config_tensor_specs(&c, &s, &n, &err), err);
    /* 1 + 16 + 90 + 10 + 5 dense x3 + 3 MoE x(2 + 48) + 2 */
    assert_int_equal(n, 1 + 16 + 90 + 10 + 15 + 3 * 50 + 2);
    for (size_t i = 0; i < n; i++) assert_null(strstr(s[i].name, "shared_experts"));
    find_spec(s, n, "model.layers.1.mlp.down_proj.weight");
    find_spec(s, n, "model.layers.6.block_sparse_moe.experts.15.w2.weight");
    free(s);
}

/* Optional fields take their documented defaults when absent. */
static void test_defaults(void **state) {
    (void)state;
    cJSON *j = load_json(TINY);
    const char *optional[] = {"num_key_value_heads", "mla_use_nope", "q_lora_rank", "moe_layer_freq",
                              "moe_renormalize", "use_grouped_topk", "num_expert_group", "topk_group",
                              "moe_router_activation_func", "hidden_act", "tie_word_embeddings", "dtype",
                              "bos_token_id", "eos_token_id"};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++) edit(j, optional[i], NULL);
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(parse_json(j, "t.json", &c, &err), err);
    assert_int_equal(c.num_key_value_heads, c.num_attention_heads);
    assert_int_equal(c.mla_use_nope, 1);
    assert_int_equal(c.moe_layer_freq, 1);
    assert_int_equal(c.moe_renormalize, 1);
    assert_int_equal(c.use_grouped_topk, 1);
    assert_int_equal(c.num_expert_group, 1);
    assert_int_equal(c.topk_group, 1);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_string_equal(c.dtype, "");
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.eos_token_id, -1);

    /* torch_dtype is the older spelling; null ids count as absent;
     * moe_renormalize false and use_grouped_topk false are runnable. */
    edit(j, "torch_dtype", "\"bfloat16\"");
    edit(j, "bos_token_id", "null");
    edit(j, "moe_renormalize", "false");
    edit(j, "use_grouped_topk", "false");
    VT_ASSERT_OK(parse_json(j, "t.json", &c, &err), err);
    assert_string_equal(c.dtype, "bfloat16");
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.moe_renormalize, 0);
    assert_int_equal(c.use_grouped_topk, 0);
    cJSON_Delete(j);
}

/* ------------------------------------------------------ malformed configs */

typedef struct bad_case {
    const char *name;
    const char *path;       /* member to edit; NULL: raw text below replaces the file */
    const char *value;      /* JSON to set; NULL deletes the member */
    const char *raw;        /* whole-file text when path is NULL */
    const char *want[3];    /* substrings the message must hold (besides the file name) */
} bad_case;

static const bad_case BAD[] = {
    {"missing_field", "vocab_size", NULL, NULL,
     {"field vocab_size: missing (expected a positive integer)"}},
    {"missing_nested_field", "linear_attn_config.head_dim", NULL, NULL,
     {"field linear_attn_config.head_dim: missing"}},
    {"missing_model_type", "model_type", NULL, NULL, {"field model_type: missing"}},
    {"missing_layer_list", "linear_attn_config.kda_layers", NULL, NULL,
     {"field linear_attn_config.kda_layers: missing"}},
    {"missing_linear_attn_config", "linear_attn_config", NULL, NULL,
     {"field linear_attn_config: missing (expected an object)"}},
    {"missing_rms_norm_eps", "rms_norm_eps", NULL, NULL, {"field rms_norm_eps: missing"}},
    {"missing_routed_scaling_factor", "routed_scaling_factor", NULL, NULL, {"field routed_scaling_factor: missing"}},
    {"wrong_type_string", "hidden_size", "\"abc\"", NULL,
     {"field hidden_size: expected a positive integer, got \"abc\""}},
    {"wrong_type_bool", "moe_renormalize", "\"yes\"", NULL,
     {"field moe_renormalize: expected true or false, got \"yes\""}},
    {"wrong_type_object", "linear_attn_config", "[1]", NULL,
     {"field linear_attn_config: expected an object, got an array"}},
    {"wrong_type_eps", "rms_norm_eps", "\"1e-5\"", NULL, {"field rms_norm_eps: expected a positive number"}},
    {"wrong_type_dtype", "dtype", "5", NULL, {"field dtype: expected a dtype name"}},
    {"non_integral_integer", "hidden_size", "192.5", NULL,
     {"field hidden_size: expected a positive integer, got 192.5"}},
    {"non_integral_nested", "linear_attn_config.num_heads", "4.25", NULL,
     {"field linear_attn_config.num_heads: expected a positive integer, got 4.25"}},
    {"zero_dimension", "qk_rope_head_dim", "0", NULL, {"field qk_rope_head_dim: expected a positive integer, got 0"}},
    {"negative_count", "num_shared_experts", "-1", NULL,
     {"field num_shared_experts: expected a non-negative integer, got -1"}},
    {"zero_conv_kernel", "linear_attn_config.short_conv_kernel_size", "0", NULL,
     {"field linear_attn_config.short_conv_kernel_size: expected a positive integer"}},
    {"zero_eps", "rms_norm_eps", "0", NULL, {"field rms_norm_eps: expected a positive number, got 0"}},
    {"negative_scaling", "routed_scaling_factor", "-2.5", NULL, {"field routed_scaling_factor: expected a positive number"}},
    {"overlapping_layer_lists", "linear_attn_config.full_attn_layers", "[4, 8, 5]", NULL,
     {"layer 5 is in both kda_layers and full_attn_layers", "field linear_attn_config.full_attn_layers"}},
    {"gap_in_layer_lists", "linear_attn_config.kda_layers", "[1, 2, 3, 6, 7]", NULL,
     {"layer 5 is in neither kda_layers nor full_attn_layers", "field linear_attn_config"}},
    {"out_of_range_layer", "linear_attn_config.full_attn_layers", "[4, 9]", NULL,
     {"field linear_attn_config.full_attn_layers: layer 9 is out of range 1..8"}},
    {"zero_based_layer", "linear_attn_config.kda_layers", "[0, 1, 2, 4, 5, 6]", NULL,
     {"field linear_attn_config.kda_layers: layer 0 is out of range 1..8", "1-based"}},
    {"duplicate_layer", "linear_attn_config.kda_layers", "[1, 2, 3, 5, 6, 7, 2]", NULL,
     {"field linear_attn_config.kda_layers: layer 2 is listed twice"}},
    {"layer_list_not_array", "linear_attn_config.kda_layers", "\"1,2,3\"", NULL,
     {"field linear_attn_config.kda_layers: expected an array of 1-based layer numbers, got \"1,2,3\""}},
    {"layer_entry_not_integer", "linear_attn_config.full_attn_layers", "[4, 8.5]", NULL,
     {"field linear_attn_config.full_attn_layers: entry 1: expected a layer number, got 8.5"}},
    {"topk_more_than_experts", "num_experts_per_token", "17", NULL,
     {"field num_experts_per_token: 17 is more than num_experts (16)"}},
    {"first_k_dense_more_than_layers", "first_k_dense_replace", "9", NULL,
     {"field first_k_dense_replace: 9 is more than num_hidden_layers (8)"}},
    {"too_many_layers", "num_hidden_layers", "300", NULL,
     {"field num_hidden_layers: 300 is more than the limit of 256"}},
    {"too_many_experts", "num_experts", "5000", NULL, {"field num_experts: 5000 is more than the limit of 4096"}},
    {"huge_integer", "vocab_size", "1e300", NULL, {"field vocab_size: expected a positive integer, got 1e+300"}},
    {"q_lora_rank_not_null", "q_lora_rank", "1536", NULL, {"field q_lora_rank: 1536 not supported", "null"}},
    {"q_lora_rank_wrong_type", "q_lora_rank", "\"none\"", NULL, {"field q_lora_rank: expected null, got \"none\""}},
    {"wrong_model_type", "model_type", "\"deepseek_v3\"", NULL,
     {"field model_type: expected \"kimi_linear\", got \"deepseek_v3\""}},
    {"model_type_not_string", "model_type", "7", NULL, {"field model_type: expected \"kimi_linear\", got 7"}},
    {"mla_use_nope_false", "mla_use_nope", "false", NULL, {"field mla_use_nope: false not supported"}},
    {"expert_groups", "num_expert_group", "2", NULL, {"field num_expert_group: 2 not supported"}},
    {"topk_groups", "topk_group", "4", NULL, {"field topk_group: 4 not supported"}},
    {"router_softmax", "moe_router_activation_func", "\"softmax\"", NULL,
     {"field moe_router_activation_func: \"softmax\" not supported"}},
    {"hidden_act_gelu", "hidden_act", "\"gelu\"", NULL, {"field hidden_act: \"gelu\" not supported"}},
    {"tied_embeddings", "tie_word_embeddings", "true", NULL, {"field tie_word_embeddings: true not supported"}},
    {"bad_bos", "bos_token_id", "-3", NULL, {"field bos_token_id: expected a non-negative integer, got -3"}},
    {"not_json", NULL, NULL, "{\"model_type\": \"kimi_linear\", \"vocab_size\": ", {"not valid JSON"}},
    {"empty_file", NULL, NULL, "", {"not valid JSON"}},
    {"trailing_data", NULL, NULL, "{\"model_type\": \"kimi_linear\"} x", {"not valid JSON", "after the object"}},
    {"top_level_array", NULL, NULL, "[1, 2, 3]", {"expected a JSON object at the top level"}},
};

static void run_bad_case(const bad_case *bc) {
    char fname[128];
    snprintf(fname, sizeof fname, "bad-%s.json", bc->name);
    vt_config c;
    memset(&c, 0x5a, sizeof c);
    vt_err err = {0};
    int rc;
    if (bc->path) {
        cJSON *j = load_json(TINY);
        edit(j, bc->path, bc->value);
        rc = parse_json(j, fname, &c, &err);
        cJSON_Delete(j);
    } else {
        rc = parse_exact(bc->raw, strlen(bc->raw), fname, &c, &err);
    }
    if (rc != VT_EINPUT) fail_msg("%s: status %d, expected VT_EINPUT (%s)", bc->name, rc, err.msg);
    assert_int_equal(err.code, VT_EINPUT);
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s: ", fname);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0)
        fail_msg("%s: message does not start with the file name: \"%s\"", bc->name, err.msg);
    for (int k = 0; k < 3 && bc->want[k]; k++) VT_ASSERT_CONTAINS(err.msg, bc->want[k]);
    assert_null(strchr(err.msg, '\n'));
    /* a failed parse leaves no half-filled config behind */
    assert_int_equal(c.num_hidden_layers, 0);
}

static void test_bad_case(void **state) { run_bad_case((const bad_case *)*state); }

/* Limits that need more than one edit. */
static void test_too_many_tensors(void **state) {
    (void)state;
    cJSON *j = load_json(TINY);
    char list[2048] = "[";
    for (int i = 1; i <= 256; i++) {
        size_t o = strlen(list);
        snprintf(list + o, sizeof list - o, "%s%d", i > 1 ? "," : "", i);
    }
    strcat(list, "]");
    edit(j, "num_hidden_layers", "256");
    edit(j, "linear_attn_config.kda_layers", list);
    edit(j, "linear_attn_config.full_attn_layers", "[]");
    edit(j, "num_experts", "4096");
    vt_config c;
    vt_err err = {0};
    assert_int_equal(parse_json(j, "many.json", &c, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "many.json: config implies");
    VT_ASSERT_CONTAINS(err.msg, "tensors, more than the limit");

    /* an all-KDA stack with no MLA layer is fine */
    edit(j, "num_experts", "16");
    VT_ASSERT_OK(parse_json(j, "many.json", &c, &err), err);
    assert_int_equal(c.layer_kind[255], VT_LAYER_KDA);

    edit(j, "num_hidden_layers", "8");
    edit(j, "linear_attn_config.kda_layers", "[1,2,3,5,6,7]");
    edit(j, "linear_attn_config.full_attn_layers", "[4,8]");
    edit(j, "vocab_size", "16777216");
    edit(j, "hidden_size", "16777216");
    assert_int_equal(parse_json(j, "huge.json", &c, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "huge.json: config implies more than");
    VT_ASSERT_CONTAINS(err.msg, "parameters");
    cJSON_Delete(j);
}

static void test_load_errors(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    assert_int_equal(vt_config_load("/nonexistent/dir/config.json", &c, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "/nonexistent/dir/config.json: cannot open config");
    assert_int_equal(vt_config_load("model/configs", &c, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "model/configs: config is not a regular file");

    /* a file's errors carry its path */
    char dir[] = "/tmp/vt_test_config_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *j = load_json(TINY);
    edit(j, "num_experts_per_token", "\"four\"");
    char *t = cJSON_Print(j);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(t, f);
    fclose(f);
    free(t);
    cJSON_Delete(j);
    assert_int_equal(vt_config_load(path, &c, &err), VT_EINPUT);
    char want[512];
    snprintf(want, sizeof want, "%s: field num_experts_per_token: expected a positive integer, got \"four\"", path);
    assert_string_equal(err.msg, want);
    unlink(path);
    rmdir(dir);
}

/* A hand-built config that breaks the bounds is refused, not trusted. */
static void test_specs_refuse_bad_struct(void **state) {
    (void)state;
    vt_config c;
    vt_err err = {0};
    VT_ASSERT_OK(vt_config_load(TINY, &c, &err), err);
    vt_config bad = c;
    bad.num_experts = 1000000;
    vt_tensor_spec *s = (vt_tensor_spec *)1;
    size_t n = 7;
    assert_int_equal(vt_config_tensor_specs(&bad, &s, &n, &err), VT_EINPUT);
    assert_null(s);
    assert_int_equal(n, 0);
    bad = c;
    bad.layer_kind[5] = VT_LAYER_NONE;
    assert_int_equal(vt_config_tensor_specs(&bad, &s, &n, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "layer 6 is in neither");
    bad = c;
    bad.num_hidden_layers = VT_MAX_LAYERS + 1;
    assert_int_equal(vt_config_tensor_specs(&bad, &s, &n, &err), VT_EINPUT);
}

/* ------------------------------------------------ checkpoint validation */

/* A 3-layer config small enough to write in milliseconds: KDA, KDA, MLA;
 * layer 0 dense, 1 and 2 MoE with 4 experts. */
static int small_config(vt_config *c, vt_err *err) {
    cJSON *j = load_json(TINY);
    edit(j, "vocab_size", "32");
    edit(j, "hidden_size", "16");
    edit(j, "intermediate_size", "24");
    edit(j, "moe_intermediate_size", "8");
    edit(j, "num_hidden_layers", "3");
    edit(j, "num_attention_heads", "2");
    edit(j, "num_key_value_heads", "2");
    edit(j, "kv_lora_rank", "8");
    edit(j, "qk_nope_head_dim", "4");
    edit(j, "qk_rope_head_dim", "4");
    edit(j, "v_head_dim", "4");
    edit(j, "linear_attn_config.num_heads", "2");
    edit(j, "linear_attn_config.head_dim", "8");
    edit(j, "linear_attn_config.kda_layers", "[1, 2]");
    edit(j, "linear_attn_config.full_attn_layers", "[3]");
    edit(j, "num_experts", "4");
    edit(j, "num_experts_per_token", "2");
    int rc = parse_json(j, "small3.json", c, err);
    cJSON_Delete(j);
    return rc;
}

enum { CK_GOOD, CK_SKIP, CK_SHAPE, CK_DTYPE, CK_EXTRA };

/* Writes DIR/model.safetensors holding the config's tensors (zeros), with one
 * deliberate defect at spec `target`. */
static void write_ckpt(const char *dir, const vt_tensor_spec *s, size_t n, int mode, size_t target) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    vt_err err = {0};
    vt_st_writer *w = NULL;
    VT_ASSERT_OK(vt_st_writer_new(&w, &err), err);
    size_t max_bytes = 0;
    vt_dtype *dt = calloc(n + 1, sizeof *dt);
    size_t *bytes = calloc(n + 1, sizeof *bytes);
    int *skip = calloc(n + 1, sizeof *skip);
    assert_true(dt && bytes && skip);
    for (size_t i = 0; i < n; i++) {
        int64_t shape[4];
        int ndim = s[i].ndim;
        memcpy(shape, s[i].shape, sizeof shape);
        dt[i] = s[i].f32_only ? VT_F32 : VT_BF16;
        if (mode == CK_SKIP && i == target) { skip[i] = 1; continue; }
        if (mode == CK_SHAPE && i == target) shape[ndim - 1] += 1;
        if (mode == CK_DTYPE && i == target) dt[i] = VT_I32;
        int64_t ne = 1;
        for (int d = 0; d < ndim; d++) ne *= shape[d];
        bytes[i] = vt_row_size(dt[i], ne);
        if (bytes[i] > max_bytes) max_bytes = bytes[i];
        VT_ASSERT_OK(vt_st_writer_declare(w, s[i].name, dt[i], ndim, shape, &err), err);
    }
    const int64_t extra_shape[1] = {3};
    if (mode == CK_EXTRA) {
        VT_ASSERT_OK(vt_st_writer_declare(w, "model.layers.0.self_attn.rotary_emb.inv_freq", VT_F32, 1, extra_shape,
                                          &err), err);
        bytes[n] = 12;
        if (bytes[n] > max_bytes) max_bytes = bytes[n];
    }
    VT_ASSERT_OK(vt_st_writer_begin(w, path, &err), err);
    void *zeros = calloc(1, max_bytes);
    assert_non_null(zeros);
    for (size_t i = 0; i < n; i++)
        if (!skip[i]) VT_ASSERT_OK(vt_st_writer_put(w, zeros, bytes[i], &err), err);
    if (mode == CK_EXTRA) VT_ASSERT_OK(vt_st_writer_put(w, zeros, bytes[n], &err), err);
    VT_ASSERT_OK(vt_st_writer_finish(w, &err), err);
    vt_st_writer_free(w);
    free(zeros);
    free(dt);
    free(bytes);
    free(skip);
}

static size_t spec_index(const vt_tensor_spec *s, size_t n, const char *name) {
    return (size_t)(find_spec(s, n, name) - s);
}

/* Writes the checkpoint for `mode`, opens it and validates it against the
 * small config; returns the status, message in *err. */
static int validate_case(int mode, const char *target_name, vt_err *err) {
    vt_config c;
    VT_ASSERT_OK(small_config(&c, err), *err);
    vt_tensor_spec *s = NULL;
    size_t n = 0;
    VT_ASSERT_OK(vt_config_tensor_specs(&c, &s, &n, err), *err);
    size_t target = target_name ? spec_index(s, n, target_name) : 0;

    char dir[] = "/tmp/vt_test_config_ck_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_ckpt(dir, s, n, mode, target);
    free(s);
    vt_ckpt *ck = NULL;
    vt_err oerr = {0};
    VT_ASSERT_OK(vt_ckpt_open(dir, &ck, &oerr), oerr);
    vt_err_clear(err);
    int rc = vt_ckpt_validate(&c, ck, err);
    vt_ckpt_close(ck);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_validate_good(void **state) {
    (void)state;
    vt_err err = {0};
    VT_ASSERT_OK(validate_case(CK_GOOD, NULL, &err), err);
}

static void test_validate_missing(void **state) {
    (void)state;
    vt_err err = {0};
    assert_int_equal(validate_case(CK_SKIP, "model.layers.1.self_attn.dt_bias", &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "model.safetensors: tensor model.layers.1.self_attn.dt_bias: missing");
}

static void test_validate_shape(void **state) {
    (void)state;
    vt_err err = {0};
    assert_int_equal(validate_case(CK_SHAPE, "model.layers.2.self_attn.kv_b_proj.weight", &err), VT_EINPUT);
    /* kv_b_proj is [Nh(nope+dv), r_kv] = [16, 8]; the writer made it [16, 9] */
    VT_ASSERT_CONTAINS(err.msg,
                       "model.safetensors: tensor model.layers.2.self_attn.kv_b_proj.weight: shape [16, 9], "
                       "expected [16, 8]");
    assert_int_equal(validate_case(CK_SHAPE, "model.layers.0.self_attn.A_log", &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "tensor model.layers.0.self_attn.A_log: shape [1, 1, 2, 2], expected [1, 1, 2, 1]");
}

static void test_validate_dtype(void **state) {
    (void)state;
    vt_err err = {0};
    assert_int_equal(validate_case(CK_DTYPE, "model.layers.1.block_sparse_moe.experts.3.w2.weight", &err),
                     VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg,
                       "model.safetensors: tensor model.layers.1.block_sparse_moe.experts.3.w2.weight: dtype I32, "
                       "expected F32, BF16 or F16");
}

static void test_validate_extra(void **state) {
    (void)state;
    vt_err err = {0};
    assert_int_equal(validate_case(CK_EXTRA, NULL, &err), VT_EINPUT);
    VT_ASSERT_CONTAINS(err.msg, "model.safetensors: 1 unexpected tensor not in the config");
    VT_ASSERT_CONTAINS(err.msg, "model.layers.0.self_attn.rotary_emb.inv_freq");
}

/* ------------------------------------------------------------------ main */

int main(void) {
    enum { N_BAD = sizeof BAD / sizeof BAD[0] };
    struct CMUnitTest tests[16 + N_BAD];
    size_t k = 0;
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_parse_tiny);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_parse_small);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_parse_48b);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_specs_tiny);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_specs_no_shared_experts_and_freq);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_defaults);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_too_many_tensors);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_load_errors);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_specs_refuse_bad_struct);
    for (size_t i = 0; i < N_BAD; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(test_bad_case, (void *)&BAD[i]);
        t.name = BAD[i].name;
        tests[k++] = t;
    }
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_validate_good);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_validate_missing);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_validate_shape);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_validate_dtype);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_validate_extra);
    return _cmocka_run_group_tests("config", tests, k, NULL, NULL);
}
