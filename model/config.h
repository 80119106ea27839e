/*
 * config.h — the Kimi-Linear config.json and the tensors it implies.
 *
 * vt_config holds every field of a Hugging Face config.json with model_type
 * "kimi_linear" that the forward pass reads. Parsing validates it: each layer
 * is exactly one of KDA or MLA (the 1-based layer lists partition
 * 1..num_hidden_layers), dimensions are positive and consistent, top-k <=
 * experts, and settings this implementation does not run (q_lora_rank not
 * null, a router activation other than sigmoid, ...) are refused by name.
 *
 * vt_config_tensor_specs lists, in one canonical order, every tensor a
 * checkpoint for this config must hold, with its shape and its role (how
 * `vtlab synth` initialises it). vt_ckpt_validate checks a checkpoint against
 * that list at load time.
 */
#ifndef VT_CONFIG_H
#define VT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "safetensors.h"

#define VT_MAX_LAYERS VT_MODEL_MAX_LAYERS   /* model/vt.h */

typedef enum vt_layer_kind { VT_LAYER_NONE = 0, VT_LAYER_KDA = 1, VT_LAYER_MLA = 2 } vt_layer_kind;

typedef struct vt_config {
    int64_t vocab_size, hidden_size, num_hidden_layers;
    int64_t intermediate_size;          /* dense SwiGLU MLP width */
    double  rms_norm_eps;
    int     tie_word_embeddings;        /* must be false: lm_head is its own tensor */
    /* MLA (full attention), NoPE */
    int64_t num_attention_heads, num_key_value_heads;
    int64_t kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    int     mla_use_nope;               /* must be true */
    /* KDA (linear attention) */
    int64_t kda_num_heads, kda_head_dim, short_conv_kernel_size;
    vt_layer_kind layer_kind[VT_MAX_LAYERS];   /* 0-based; from the 1-based lists */
    /* MoE */
    int64_t num_experts, num_experts_per_token, moe_intermediate_size, num_shared_experts;
    int64_t first_k_dense_replace, moe_layer_freq;
    double  routed_scaling_factor;
    int     moe_renormalize, use_grouped_topk;
    int64_t num_expert_group, topk_group;
    /* informational */
    char    dtype[16];                  /* "dtype" or "torch_dtype", "" if absent */
    int64_t bos_token_id, eos_token_id; /* -1 if absent */
} vt_config;

/* json need not be NUL-terminated; fname is used in messages ("FILE: field
 * X: expected ..."). Fuzz target for the config parser. */
int vt_config_parse(const char *json, size_t len, const char *fname, vt_config *cfg, vt_err *err);
int vt_config_load(const char *path, vt_config *cfg, vt_err *err);

/* 1 when layer i (0-based) has a MoE block, 0 when it has a dense MLP. */
int vt_config_layer_is_moe(const vt_config *cfg, int64_t i);
int64_t vt_config_n_moe_layers(const vt_config *cfg);

/* How synth initialises a tensor. */
typedef enum vt_tensor_role {
    VT_ROLE_EMBED = 1,      /* token embedding */
    VT_ROLE_LM_HEAD,        /* output projection: scaled for a peaked softmax */
    VT_ROLE_LINEAR,         /* [out, in] weight: N(0, 1/in) */
    VT_ROLE_NORM,           /* RMSNorm weight: near 1 */
    VT_ROLE_CONV,           /* depthwise conv weight [P, 1, K] */
    VT_ROLE_A_LOG,          /* KDA A_log: log U(1, 16) */
    VT_ROLE_DT_BIAS,        /* KDA dt_bias: inverse softplus of a log-uniform step */
    VT_ROLE_ROUTER_BIAS,    /* e_score_correction_bias: nonzero */
} vt_tensor_role;

typedef struct vt_tensor_spec {
    char           name[128];
    int            ndim;
    int64_t        shape[4];
    vt_tensor_role role;
    int            f32_only;   /* small vectors kept in f32 by synth (A_log, dt_bias, router bias) */
} vt_tensor_spec;

/* Every tensor the checkpoint must hold, in canonical order (embedding, then
 * layer by layer, then final norm and lm_head). *out is malloc'd. */
int vt_config_tensor_specs(const vt_config *cfg, vt_tensor_spec **out, size_t *n, vt_err *err);

/* Load-time checkpoint check: every expected tensor present with its shape and
 * a dtype of F32, BF16 or F16. Extra tensors are reported (message lists them)
 * and are an error. Errors name the checkpoint file and the tensor. */
int vt_ckpt_validate(const vt_config *cfg, const vt_ckpt *ck, vt_err *err);

#endif
