// devengine.cpp — a small, standalone Kimi-Linear inference engine that is not vtlab's model.
//
// It is laid out the way an inference tree's device file is: checkpoint loading, one
// function per layer kind (KDA, MLA, dense MLP, MoE), a residual stream held in a typed
// buffer whose dtype is a knob, and the MoE data path written as the explicit
// route -> gather -> experts -> scatter -> combine sequence. It speaks vtlab's engine
// protocol (docs/engine-protocol.md) through model/vtprobe.h.
//
// Knobs (environment):
//   DEV_BF16_STREAM  0|1                     residual stream stored in bf16 (rounded after
//                                            the embedding and after every residual add)
//   DEV_FAULT        none|scatter_row_bytes  replays the MoE scatter defect: row bytes sized
//                                            from the stream dtype while copying f32 rows
//   DEV_THREADS      0..64                   accepted and reported; the engine is single-threaded
// Probe mode from VTP_PROBE (off|on|audit). Model from --model DIR, else VTP_MODEL.
//
// Numerics: f32 storage everywhere except the stream; dot products, norm statistics and
// softmax sums accumulate in double; the KDA state is f32. Semantics follow the project's
// f64 reference (tests/reference/kimi_ref.py).

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "json.h"
#define VTPROBE_IMPLEMENTATION
#include "vtprobe.h"

#ifndef DEVENGINE_COMMIT
#define DEVENGINE_COMMIT ""
#endif

namespace dev {

// ------------------------------------------------------------------------------ dtypes

enum class DType { F32, BF16, F16 };

static size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
static const char *dtype_name(DType t) { return t == DType::F32 ? "f32" : t == DType::BF16 ? "bf16" : "f16"; }

static uint32_t f32_bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static float bits_f32(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }

static uint16_t f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);   // NaN stays NaN (quiet)
    u += 0x7FFFu + ((u >> 16) & 1u);                                                 // round to nearest even
    return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        float v = std::ldexp((float)man, -24);       // subnormal
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// ------------------------------------------------------------------------------ checkpoint

struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> v;
    int64_t numel() const { int64_t n = 1; for (int64_t s : shape) n *= s; return n; }
    const float *row(int64_t r) const { return v.data() + r * (shape.empty() ? 1 : numel() / shape[0]); }
};

static std::string read_file(const std::string &path) {
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error(path + ": " + std::strerror(errno));
    std::string s;
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    bool bad = std::ferror(f);
    std::fclose(f);
    if (bad) throw std::runtime_error(path + ": read error");
    return s;
}

// Reads one .safetensors file; every tensor is widened to f32.
static void load_safetensors(const std::string &path, std::map<std::string, Tensor> &out) {
    std::string raw = read_file(path);
    if (raw.size() < 8) throw std::runtime_error(path + ": too short for a safetensors header");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)raw[(size_t)i];
    if (hlen > raw.size() - 8) throw std::runtime_error(path + ": header length past the end of the file");
    Json hdr = json_parse(raw.substr(8, hlen));
    if (hdr.kind != Json::Object) throw std::runtime_error(path + ": header is not a JSON object");
    const size_t base = 8 + hlen;
    for (const auto &kv : hdr.obj) {
        if (kv.first == "__metadata__") continue;
        const Json &info = kv.second;
        const Json *dt = info.get("dtype"), *shp = info.get("shape"), *offs = info.get("data_offsets");
        if (!dt || !shp || !offs || shp->kind != Json::Array || offs->kind != Json::Array || offs->arr.size() != 2)
            throw std::runtime_error(path + ": tensor " + kv.first + ": malformed entry");
        DType t;
        if (dt->str == "F32") t = DType::F32;
        else if (dt->str == "BF16") t = DType::BF16;
        else if (dt->str == "F16") t = DType::F16;
        else throw std::runtime_error(path + ": tensor " + kv.first + ": unsupported dtype " + dt->str);
        Tensor tn;
        for (const Json &s : shp->arr) {
            int64_t d = s.as_int();
            if (d < 0) throw std::runtime_error(path + ": tensor " + kv.first + ": negative dimension");
            tn.shape.push_back(d);
        }
        int64_t n = tn.numel(), b = offs->arr[0].as_int(), e = offs->arr[1].as_int();
        if (b < 0 || e < b || (uint64_t)(e - b) != (uint64_t)n * dtype_size(t) || base + (uint64_t)e > raw.size())
            throw std::runtime_error(path + ": tensor " + kv.first + ": bad data_offsets");
        const unsigned char *p = (const unsigned char *)raw.data() + base + b;
        tn.v.resize((size_t)n);
        for (int64_t i = 0; i < n; i++) {
            if (t == DType::F32) {
                uint32_t u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                             (uint32_t)p[4 * i + 3] << 24;
                tn.v[(size_t)i] = bits_f32(u);
            } else {
                uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
                tn.v[(size_t)i] = t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
            }
        }
        out[kv.first] = std::move(tn);
    }
}

// All *.safetensors of the directory (one file, or the shards of a sharded checkpoint).
static std::map<std::string, Tensor> load_checkpoint(const std::string &dir) {
    DIR *dp = opendir(dir.c_str());
    if (!dp) throw std::runtime_error(dir + ": " + std::strerror(errno));
    std::vector<std::string> files;
    while (struct dirent *e = readdir(dp)) {
        std::string n = e->d_name;
        if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0) files.push_back(n);
    }
    closedir(dp);
    if (files.empty()) throw std::runtime_error(dir + ": no *.safetensors file");
    std::sort(files.begin(), files.end());
    std::map<std::string, Tensor> w;
    for (const auto &f : files) load_safetensors(dir + "/" + f, w);
    return w;
}

// ------------------------------------------------------------------------------ config

struct Config {
    int64_t vocab, D, L, I, Im, E, K, n_shared, first_dense, moe_freq;
    double eps, scale;
    bool renorm;
    int64_t kda_H, kda_d, conv_K;
    int64_t mla_H, r_kv, nope, rope, dv;
    std::vector<char> kind;   // 'K' or 'M' per layer

    bool is_moe(int64_t i) const { return i >= first_dense && moe_freq > 0 && i % moe_freq == 0; }
};

static const Json *field(const Json &c, std::initializer_list<const char *> names) {
    for (const char *n : names) {
        const Json *v = c.get(n);
        if (v && !v->is_null()) return v;
    }
    return nullptr;
}
static int64_t need_int(const Json &c, std::initializer_list<const char *> names) {
    const Json *v = field(c, names);
    if (!v) throw std::runtime_error(std::string("config.json: missing ") + *names.begin());
    return v->as_int();
}

static Config parse_config(const std::string &dir) {
    Json c = json_parse(read_file(dir + "/config.json"));
    Config g;
    g.vocab = need_int(c, {"vocab_size"});
    g.D = need_int(c, {"hidden_size"});
    g.L = need_int(c, {"num_hidden_layers"});
    g.I = need_int(c, {"intermediate_size"});
    g.Im = need_int(c, {"moe_intermediate_size"});
    g.E = need_int(c, {"num_experts", "n_routed_experts"});
    g.K = need_int(c, {"num_experts_per_token", "num_experts_per_tok"});
    const Json *v;
    g.n_shared = (v = field(c, {"num_shared_experts", "n_shared_experts"})) ? v->as_int() : 0;
    g.first_dense = (v = field(c, {"first_k_dense_replace"})) ? v->as_int() : 0;
    g.moe_freq = (v = field(c, {"moe_layer_freq"})) ? v->as_int() : 1;
    g.scale = (v = field(c, {"routed_scaling_factor"})) ? v->as_num() : 1.0;
    g.renorm = (v = field(c, {"moe_renormalize", "norm_topk_prob"})) ? v->b : true;
    if ((v = field(c, {"moe_router_activation_func"})) && v->str != "sigmoid")
        throw std::runtime_error("config.json: only the sigmoid router is implemented");
    if ((v = field(c, {"num_expert_group"})) && v->as_int() > 1)
        throw std::runtime_error("config.json: num_expert_group > 1 is not implemented");
    if (field(c, {"q_lora_rank"})) throw std::runtime_error("config.json: q_lora_rank must be null");
    if ((v = field(c, {"mla_use_nope"})) && !v->b) throw std::runtime_error("config.json: only mla_use_nope=true");
    g.eps = c.get("rms_norm_eps") ? c.get("rms_norm_eps")->as_num() : 1e-5;
    const Json *la = c.get("linear_attn_config");
    if (!la || la->kind != Json::Object) throw std::runtime_error("config.json: missing linear_attn_config");
    g.kda_H = need_int(*la, {"num_heads"});
    g.kda_d = need_int(*la, {"head_dim"});
    g.conv_K = (v = la->get("short_conv_kernel_size")) ? v->as_int() : 4;
    g.mla_H = need_int(c, {"num_attention_heads"});
    g.r_kv = need_int(c, {"kv_lora_rank"});
    g.nope = need_int(c, {"qk_nope_head_dim"});
    g.rope = need_int(c, {"qk_rope_head_dim"});
    g.dv = need_int(c, {"v_head_dim"});
    g.kind.assign((size_t)g.L, '?');
    auto mark = [&](const char *key, char k) {
        const Json *a = la->get(key);
        if (!a) return;
        for (const Json &x : a->arr) {
            int64_t i = x.as_int() - 1;   // 1-based in the config
            if (i < 0 || i >= g.L) throw std::runtime_error(std::string("config.json: ") + key + " out of range");
            if (g.kind[(size_t)i] != '?') throw std::runtime_error("config.json: a layer is both KDA and MLA");
            g.kind[(size_t)i] = k;
        }
    };
    mark("kda_layers", 'K');
    mark("full_attn_layers", 'M');
    for (int64_t i = 0; i < g.L; i++)
        if (g.kind[(size_t)i] == '?') throw std::runtime_error("config.json: layer " + std::to_string(i) + " has no kind");
    if (g.vocab <= 0 || g.D <= 0 || g.L <= 0 || g.E <= 0 || g.K <= 0 || g.K > g.E)
        throw std::runtime_error("config.json: bad shapes");
    return g;
}

// ------------------------------------------------------------------------------ weights

struct SwiGLU { const Tensor *gate, *up, *down; };
struct KdaW {
    const Tensor *q, *k, *v, *qc, *kc, *vc, *A_log, *dt_bias, *fa, *fb, *b, *ga, *gb, *onorm, *o;
};
struct MlaW { const Tensor *q, *kva, *kvnorm, *kvb, *o; };
struct LayerW {
    char kind;
    bool moe;
    const Tensor *in_norm, *post_norm;
    KdaW kda;
    MlaW mla;
    SwiGLU dense, shared;
    bool has_shared;
    const Tensor *router, *router_bias;
    std::vector<SwiGLU> experts;
};

struct Model {
    std::string dir;
    Config cfg;
    std::map<std::string, Tensor> w;
    const Tensor *embed, *norm, *lm_head;
    std::vector<LayerW> layers;

    const Tensor *t(const std::string &name, std::initializer_list<int64_t> shape) {
        auto it = w.find(name);
        if (it == w.end()) throw std::runtime_error("checkpoint lacks tensor " + name);
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        if (it->second.numel() != n)
            throw std::runtime_error("tensor " + name + ": " + std::to_string(it->second.numel()) +
                                     " elements, expected " + std::to_string(n));
        return &it->second;
    }
    SwiGLU swiglu(const std::string &p, const char *g, const char *u, const char *d, int64_t inter) {
        const int64_t D = cfg.D;
        return SwiGLU{t(p + "." + g + ".weight", {inter, D}), t(p + "." + u + ".weight", {inter, D}),
                      t(p + "." + d + ".weight", {D, inter})};
    }
};

static void load_model(Model &m, const std::string &dir) {
    m.dir = dir;
    m.cfg = parse_config(dir);
    m.w = load_checkpoint(dir);
    const Config &c = m.cfg;
    const int64_t D = c.D;
    m.embed = m.t("model.embed_tokens.weight", {c.vocab, D});
    m.norm = m.t("model.norm.weight", {D});
    m.lm_head = m.t("lm_head.weight", {c.vocab, D});
    m.layers.resize((size_t)c.L);
    for (int64_t i = 0; i < c.L; i++) {
        LayerW &L = m.layers[(size_t)i];
        const std::string p = "model.layers." + std::to_string(i);
        L.kind = c.kind[(size_t)i];
        L.in_norm = m.t(p + ".input_layernorm.weight", {D});
        L.post_norm = m.t(p + ".post_attention_layernorm.weight", {D});
        const std::string a = p + ".self_attn.";
        if (L.kind == 'K') {
            const int64_t H = c.kda_H, d = c.kda_d, P = H * d, Kc = c.conv_K;
            KdaW &k = L.kda;
            k.q = m.t(a + "q_proj.weight", {P, D});
            k.k = m.t(a + "k_proj.weight", {P, D});
            k.v = m.t(a + "v_proj.weight", {P, D});
            k.qc = m.t(a + "q_conv1d.weight", {P, 1, Kc});
            k.kc = m.t(a + "k_conv1d.weight", {P, 1, Kc});
            k.vc = m.t(a + "v_conv1d.weight", {P, 1, Kc});
            k.A_log = m.t(a + "A_log", {H});
            k.dt_bias = m.t(a + "dt_bias", {P});
            k.fa = m.t(a + "f_a_proj.weight", {d, D});
            k.fb = m.t(a + "f_b_proj.weight", {P, d});
            k.b = m.t(a + "b_proj.weight", {H, D});
            k.ga = m.t(a + "g_a_proj.weight", {d, D});
            k.gb = m.t(a + "g_b_proj.weight", {P, d});
            k.onorm = m.t(a + "o_norm.weight", {d});
            k.o = m.t(a + "o_proj.weight", {D, P});
        } else {
            const int64_t Nh = c.mla_H, qk = c.nope + c.rope;
            MlaW &ml = L.mla;
            ml.q = m.t(a + "q_proj.weight", {Nh * qk, D});
            ml.kva = m.t(a + "kv_a_proj_with_mqa.weight", {c.r_kv + c.rope, D});
            ml.kvnorm = m.t(a + "kv_a_layernorm.weight", {c.r_kv});
            ml.kvb = m.t(a + "kv_b_proj.weight", {Nh * (c.nope + c.dv), c.r_kv});
            ml.o = m.t(a + "o_proj.weight", {D, Nh * c.dv});
        }
        L.moe = c.is_moe(i);
        if (!L.moe) {
            L.dense = m.swiglu(p + ".mlp", "gate_proj", "up_proj", "down_proj", c.I);
            continue;
        }
        const std::string b = p + ".block_sparse_moe";
        L.router = m.t(b + ".gate.weight", {c.E, D});
        L.router_bias = m.t(b + ".gate.e_score_correction_bias", {c.E});
        for (int64_t e = 0; e < c.E; e++)
            L.experts.push_back(m.swiglu(b + ".experts." + std::to_string(e), "w1", "w3", "w2", c.Im));
        L.has_shared = c.n_shared > 0;
        if (L.has_shared) L.shared = m.swiglu(b + ".shared_experts", "gate_proj", "up_proj", "down_proj", c.Im * c.n_shared);
    }
}

// ------------------------------------------------------------------------------ kernels

// y[M, N] = x[M, K] . W[N, K]^T, accumulated in double.
static void linear(const float *x, int64_t M, int64_t K, const Tensor &W, float *y) {
    const int64_t N = W.shape[0];
    const float *w = W.v.data();
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        for (int64_t n = 0; n < N; n++) {
            const float *wr = w + n * K;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int64_t k = 0;
            for (; k + 4 <= K; k += 4) {
                s0 += (double)xr[k] * wr[k];
                s1 += (double)xr[k + 1] * wr[k + 1];
                s2 += (double)xr[k + 2] * wr[k + 2];
                s3 += (double)xr[k + 3] * wr[k + 3];
            }
            for (; k < K; k++) s0 += (double)xr[k] * wr[k];
            y[m * N + n] = (float)((s0 + s1) + (s2 + s3));
        }
    }
}

static float sigmoidf_(float x) { return 1.0f / (1.0f + std::exp(-x)); }
static float siluf_(float x) { return x / (1.0f + std::exp(-x)); }
static float softplusf_(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// RMSNorm over rows of n: statistic in double, scale and weight in f32.
static void rmsnorm(const float *x, int64_t M, int64_t n, const float *w, double eps, float *y) {
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * n;
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / std::sqrt(ss / (double)n + eps));
        for (int64_t i = 0; i < n; i++) y[r * n + i] = xr[i] * inv * w[i];
    }
}

// out[T, D] = (silu(x.Wg^T) * (x.Wu^T)) . Wd^T
static void swiglu(const SwiGLU &w, const float *x, int64_t T, int64_t D, float *out) {
    const int64_t I = w.gate->shape[0];
    std::vector<float> a((size_t)(T * I)), b((size_t)(T * I));
    linear(x, T, D, *w.gate, a.data());
    linear(x, T, D, *w.up, b.data());
    for (size_t i = 0; i < a.size(); i++) a[i] = siluf_(a[i]) * b[i];
    linear(a.data(), T, I, *w.down, out);
}

// ------------------------------------------------------------------------------ engine state

struct Knobs {
    bool bf16_stream = false;
    bool fault_scatter = false;
    int threads = 0;
};

// The residual stream: a typed buffer (f32 or bf16), plus its f32 widening that the
// sublayers read.
struct Stream {
    DType dt;
    int64_t T, D;
    std::vector<unsigned char> data;   // T*D elements of dt
    std::vector<float> f;              // the stored value widened to f32

    Stream(DType t, int64_t T_, int64_t D_) : dt(t), T(T_), D(D_), data((size_t)(T_ * D_) * dtype_size(t)), f((size_t)(T_ * D_)) {}
    int64_t row_bytes() const { return D * (int64_t)dtype_size(dt); }
    // store f into the stream dtype and read the stored value back
    void store() {
        if (dt == DType::F32) { std::memcpy(data.data(), f.data(), f.size() * 4); return; }
        uint16_t *h = (uint16_t *)data.data();
        for (size_t i = 0; i < f.size(); i++) { h[i] = f32_to_bf16(f[i]); f[i] = bf16_to_f32(h[i]); }
    }
    void add(const float *o) {
        for (size_t i = 0; i < f.size(); i++) f[i] += o[i];
        store();
    }
};

struct Engine {
    Model m;
    Knobs k;
    DType stream_dt() const { return k.bf16_stream ? DType::BF16 : DType::F32; }
};

// ------------------------------------------------------------------------------ KDA layer

// Depthwise causal conv (kernel Kc, w[c, Kc-1] on the current token) + SiLU, zero history.
static void short_conv_silu(const float *x0, int64_t T, int64_t P, int64_t Kc, const Tensor &w, float *y) {
    for (int64_t t = 0; t < T; t++)
        for (int64_t c = 0; c < P; c++) {
            double s = 0;
            for (int64_t j = 0; j < Kc; j++) {
                int64_t tt = t - (Kc - 1) + j;
                if (tt >= 0) s += (double)w.v[(size_t)(c * Kc + j)] * x0[tt * P + c];
            }
            y[t * P + c] = siluf_((float)s);
        }
}

static void l2norm_heads(float *x, int64_t T, int64_t H, int64_t d, float mul) {
    for (int64_t r = 0; r < T * H; r++) {
        float *p = x + r * d;
        double ss = 0;
        for (int64_t i = 0; i < d; i++) ss += (double)p[i] * p[i];
        float inv = (float)(1.0 / std::sqrt(ss + 1e-6)) * mul;
        for (int64_t i = 0; i < d; i++) p[i] *= inv;
    }
}

static void kda_layer(const Engine &eng, const LayerW &L, const float *x, int64_t T, float *out) {
    const Config &c = eng.m.cfg;
    const KdaW &w = L.kda;
    const int64_t D = c.D, H = c.kda_H, d = c.kda_d, P = H * d, Kc = c.conv_K;
    std::vector<float> q0((size_t)(T * P)), k0((size_t)(T * P)), v0((size_t)(T * P));
    std::vector<float> q((size_t)(T * P)), k((size_t)(T * P)), v((size_t)(T * P));
    linear(x, T, D, *w.q, q0.data());
    linear(x, T, D, *w.k, k0.data());
    linear(x, T, D, *w.v, v0.data());
    short_conv_silu(q0.data(), T, P, Kc, *w.qc, q.data());
    short_conv_silu(k0.data(), T, P, Kc, *w.kc, k.data());
    short_conv_silu(v0.data(), T, P, Kc, *w.vc, v.data());
    l2norm_heads(q.data(), T, H, d, (float)(1.0 / std::sqrt((double)d)));
    l2norm_heads(k.data(), T, H, d, 1.0f);

    // gates, f32: g = -exp(A_log) * softplus(f + dt_bias), beta = sigmoid(x.Wb^T), output gate gg
    std::vector<float> fa((size_t)(T * d)), g((size_t)(T * P)), beta((size_t)(T * H)), gg((size_t)(T * P));
    linear(x, T, D, *w.fa, fa.data());
    linear(fa.data(), T, d, *w.fb, g.data());
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float A = std::exp(w.A_log->v[(size_t)h]);
            for (int64_t i = 0; i < d; i++) {
                size_t ix = (size_t)(t * P + h * d + i);
                g[ix] = -A * softplusf_(g[ix] + w.dt_bias->v[(size_t)(h * d + i)]);
            }
        }
    linear(x, T, D, *w.b, beta.data());
    for (float &b : beta) b = sigmoidf_(b);
    linear(x, T, D, *w.ga, fa.data());
    linear(fa.data(), T, d, *w.gb, gg.data());

    // delta rule with per-key-channel decay; state S[h][i][j] in f32, read after the update
    std::vector<float> S((size_t)(H * d * d), 0.0f), o((size_t)(T * P)), u((size_t)d);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            float *Sh = S.data() + h * d * d;
            const float *kt = k.data() + t * P + h * d, *qt = q.data() + t * P + h * d, *vt = v.data() + t * P + h * d;
            const float *gt = g.data() + t * P + h * d;
            for (int64_t i = 0; i < d; i++) {
                float dec = std::exp(gt[i]);
                for (int64_t j = 0; j < d; j++) Sh[i * d + j] *= dec;
            }
            for (int64_t j = 0; j < d; j++) {
                double s = 0;
                for (int64_t i = 0; i < d; i++) s += (double)kt[i] * Sh[i * d + j];
                u[(size_t)j] = beta[(size_t)(t * H + h)] * (vt[j] - (float)s);   // delta
            }
            for (int64_t i = 0; i < d; i++)
                for (int64_t j = 0; j < d; j++) Sh[i * d + j] += kt[i] * u[(size_t)j];
            for (int64_t j = 0; j < d; j++) {
                double s = 0;
                for (int64_t i = 0; i < d; i++) s += (double)qt[i] * Sh[i * d + j];
                o[(size_t)(t * P + h * d + j)] = (float)s;
            }
        }

    // gated output norm per head: rmsnorm(o) * o_norm * sigmoid(gg), then o_proj
    std::vector<float> y((size_t)(T * P));
    rmsnorm(o.data(), T * H, d, w.onorm->v.data(), c.eps, y.data());
    for (size_t i = 0; i < y.size(); i++) y[i] *= sigmoidf_(gg[i]);
    linear(y.data(), T, P, *w.o, out);
}

// ------------------------------------------------------------------------------ MLA layer

static void mla_layer(const Engine &eng, const LayerW &L, const float *x, int64_t T, float *out) {
    const Config &c = eng.m.cfg;
    const MlaW &w = L.mla;
    const int64_t D = c.D, Nh = c.mla_H, nope = c.nope, rope = c.rope, dv = c.dv, r = c.r_kv, qk = nope + rope;
    std::vector<float> q((size_t)(T * Nh * qk)), ca((size_t)(T * (r + rope))), ckv((size_t)(T * r)), cn((size_t)(T * r));
    std::vector<float> kv((size_t)(T * Nh * (nope + dv))), o((size_t)(T * Nh * dv));
    linear(x, T, D, *w.q, q.data());
    linear(x, T, D, *w.kva, ca.data());
    for (int64_t t = 0; t < T; t++) std::memcpy(&ckv[(size_t)(t * r)], &ca[(size_t)(t * (r + rope))], (size_t)r * 4);
    rmsnorm(ckv.data(), T, r, w.kvnorm->v.data(), 1e-6, cn.data());   // kv_a_layernorm: eps 1e-6 (transformers)
    linear(cn.data(), T, r, *w.kvb, kv.data());
    const double scale = 1.0 / std::sqrt((double)qk);
    std::vector<double> s((size_t)T);
    for (int64_t h = 0; h < Nh; h++)
        for (int64_t t = 0; t < T; t++) {
            const float *qh = q.data() + (t * Nh + h) * qk;
            double mx = -INFINITY;
            for (int64_t n = 0; n <= t; n++) {   // causal; k = [k_nope(h), k_rot] (no rotary)
                const float *kn = kv.data() + (n * Nh + h) * (nope + dv);
                const float *kr = ca.data() + n * (r + rope) + r;
                double dot = 0;
                for (int64_t i = 0; i < nope; i++) dot += (double)qh[i] * kn[i];
                for (int64_t i = 0; i < rope; i++) dot += (double)qh[nope + i] * kr[i];
                s[(size_t)n] = dot * scale;
                mx = std::max(mx, s[(size_t)n]);
            }
            double sum = 0;
            for (int64_t n = 0; n <= t; n++) sum += (s[(size_t)n] = std::exp(s[(size_t)n] - mx));
            for (int64_t j = 0; j < dv; j++) {
                double acc = 0;
                for (int64_t n = 0; n <= t; n++) acc += s[(size_t)n] * kv[(size_t)((n * Nh + h) * (nope + dv) + nope + j)];
                o[(size_t)((t * Nh + h) * dv + j)] = (float)(acc / sum);
            }
        }
    linear(o.data(), T, Nh * dv, *w.o, out);
}

// ------------------------------------------------------------------------------ FFN: dense MLP

static void dense_mlp_layer(const Engine &eng, const LayerW &L, const float *x, int64_t T, float *out) {
    swiglu(L.dense, x, T, eng.m.cfg.D, out);
}

// ------------------------------------------------------------------------------ FFN: MoE

// The defect, replayed on purpose (DEV_FAULT=scatter_row_bytes): row bytes come from the
// stream dtype, and the same row bytes serve as the stride of both buffers.
static int64_t scatter_rows_stream_sized(float *dst, int64_t dst_bytes, const int64_t *dst_rows, const float *src,
                                         int64_t src_bytes, int64_t n, int64_t D, DType stream) {
    const int64_t row_bytes = D * (int64_t)dtype_size(stream);   // the defect: not sizeof(f32)
    for (int64_t i = 0; i < n; i++) {
        int64_t doff = dst_rows[i] * row_bytes, soff = i * row_bytes;
        if (doff + row_bytes > dst_bytes || soff + row_bytes > src_bytes) continue;   // stay memory-safe
        std::memcpy((char *)dst + doff, (const char *)src + soff, (size_t)row_bytes);
    }
    return row_bytes;
}

static void moe_layer(const Engine &eng, int layer, const LayerW &L, const float *x, int64_t N, float *out,
                      vtp_probes *pr) {
    const Config &c = eng.m.cfg;
    const int64_t D = c.D, E = c.E, K = c.K, NK = N * K;
    const int audit = pr->mode == VTP_AUDIT;
    const int64_t f32_row = D * 4;

    // route: sigmoid scores in f32; the bias chooses, the unbiased scores weigh
    std::vector<float> logit((size_t)(N * E)), wts((size_t)NK), sg((size_t)E), sc((size_t)E);
    std::vector<int64_t> sel((size_t)NK);
    linear(x, N, D, *L.router, logit.data());
    for (int64_t t = 0; t < N; t++) {
        for (int64_t e = 0; e < E; e++) {
            sg[(size_t)e] = sigmoidf_(logit[(size_t)(t * E + e)]);
            sc[(size_t)e] = sg[(size_t)e] + L.router_bias->v[(size_t)e];
        }
        for (int64_t kk = 0; kk < K; kk++) {   // top-k, ties to the lower expert index
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t j = 0; j < kk; j++) taken |= sel[(size_t)(t * K + j)] == e;
                if (!taken && (best < 0 || sc[(size_t)e] > sc[(size_t)best])) best = e;
            }
            sel[(size_t)(t * K + kk)] = best;
        }
        double sum = 0;
        for (int64_t kk = 0; kk < K; kk++) sum += (wts[(size_t)(t * K + kk)] = sg[(size_t)sel[(size_t)(t * K + kk)]]);
        for (int64_t kk = 0; kk < K; kk++) {
            float v = wts[(size_t)(t * K + kk)];
            if (c.renorm && K > 1) v = (float)(v / (sum + 1e-20));
            wts[(size_t)(t * K + kk)] = v * (float)c.scale;
        }
    }

    // sort the (token, slot) pairs by expert: order[i] = pair index p = t*K + k of sorted row i
    std::vector<int64_t> start((size_t)E + 1, 0), order((size_t)NK);
    for (int64_t p = 0; p < NK; p++) start[(size_t)sel[(size_t)p] + 1]++;
    for (int64_t e = 0; e < E; e++) start[(size_t)e + 1] += start[(size_t)e];
    {
        std::vector<int64_t> fill(start.begin(), start.end() - 1);
        for (int64_t p = 0; p < NK; p++) order[(size_t)fill[(size_t)sel[(size_t)p]]++] = p;
    }

    // gather: token rows -> xg [NK, D] f32, expert-contiguous
    std::vector<float> xg((size_t)(NK * D));
    if (audit) vtp_sentinel_fill(xg.data(), "f32", NK, f32_row);
    for (int64_t i = 0; i < NK; i++) std::memcpy(&xg[(size_t)(i * D)], x + (order[(size_t)i] / K) * D, (size_t)f32_row);
    vtp_probe_copy(pr, "moe.gather", layer, "f32", "f32", NK, f32_row, f32_row, f32_row, 0,
                   audit ? vtp_rows_unwritten(xg.data(), "f32", NK, f32_row) : -1);

    // experts: one SwiGLU chain per expert over its contiguous rows -> y [NK, D] f32
    std::vector<float> y((size_t)(NK * D));
    for (int64_t e = 0; e < E; e++) {
        int64_t r0 = start[(size_t)e], n = start[(size_t)e + 1] - r0;
        if (n) swiglu(L.experts[(size_t)e], &xg[(size_t)(r0 * D)], n, D, &y[(size_t)(r0 * D)]);
    }
    vtp_probe_buffer(pr, "moe.expert.y", layer, "f32", NK, f32_row);

    // scatter: y row i -> expert_out row order[i] (f32 both sides)
    std::vector<float> eo((size_t)(NK * D), 0.0f);
    if (audit) vtp_sentinel_fill(eo.data(), "f32", NK, f32_row);
    int64_t bytes_per_row = f32_row;
    if (eng.k.fault_scatter)
        bytes_per_row = scatter_rows_stream_sized(eo.data(), NK * f32_row, order.data(), y.data(), NK * f32_row, NK, D,
                                                  eng.stream_dt());
    else
        for (int64_t i = 0; i < NK; i++)
            std::memcpy(&eo[(size_t)(order[(size_t)i] * D)], &y[(size_t)(i * D)], (size_t)f32_row);
    int64_t unwritten = -1;
    if (audit) {
        unwritten = vtp_rows_unwritten(eo.data(), "f32", NK, f32_row);
        const uint32_t sent = 0x7FA5A5A5u;   // clear what the copy left: combine reads zeros, not NaNs
        for (float &v : eo) if (std::memcmp(&v, &sent, 4) == 0) v = 0.0f;
    }
    vtp_probe_copy(pr, "moe.scatter", layer, "f32", "f32", NK, bytes_per_row, f32_row, f32_row, 0, unwritten);

    // combine: out[t] = sum_k w[t,k] * expert_out[t*K + k], then the shared expert
    for (int64_t t = 0; t < N; t++) {
        float *o = out + t * D;
        std::fill(o, o + D, 0.0f);
        for (int64_t kk = 0; kk < K; kk++) {
            const float *row = &eo[(size_t)((t * K + kk) * D)];
            float wk = wts[(size_t)(t * K + kk)];
            for (int64_t i = 0; i < D; i++) o[i] += wk * row[i];
        }
    }
    vtp_probe_copy(pr, "moe.combine", layer, "f32", "f32", NK, f32_row, f32_row, f32_row, 1, -1);
    if (L.has_shared) {
        std::vector<float> sh((size_t)(N * D));
        swiglu(L.shared, x, N, D, sh.data());
        for (int64_t i = 0; i < N * D; i++) out[i] += sh[(size_t)i];
    }
}

// ------------------------------------------------------------------------------ decoder

static void forward(const Engine &eng, const int32_t *tok, int64_t T, float *logits, float *residuals, vtp_probes *pr) {
    const Model &m = eng.m;
    const Config &c = m.cfg;
    const int64_t D = c.D, V = c.vocab;
    Stream h(eng.stream_dt(), T, D);
    for (int64_t t = 0; t < T; t++) std::memcpy(&h.f[(size_t)(t * D)], m.embed->row(tok[t]), (size_t)D * 4);
    h.store();
    std::vector<float> xn((size_t)(T * D)), o((size_t)(T * D));
    for (int64_t l = 0; l < c.L; l++) {
        const LayerW &L = m.layers[(size_t)l];
        rmsnorm(h.f.data(), T, D, L.in_norm->v.data(), c.eps, xn.data());
        if (L.kind == 'K') kda_layer(eng, L, xn.data(), T, o.data());
        else mla_layer(eng, L, xn.data(), T, o.data());
        h.add(o.data());
        if (residuals) std::memcpy(residuals + (l * 2 + 0) * T * D, h.f.data(), (size_t)(T * D) * 4);

        rmsnorm(h.f.data(), T, D, L.post_norm->v.data(), c.eps, xn.data());
        if (L.moe) moe_layer(eng, (int)l, L, xn.data(), T, o.data(), pr);
        else dense_mlp_layer(eng, L, xn.data(), T, o.data());
        h.add(o.data());
        if (residuals) std::memcpy(residuals + (l * 2 + 1) * T * D, h.f.data(), (size_t)(T * D) * 4);
        vtp_probe_buffer(pr, "residual.stream", (int)l, dtype_name(h.dt), T, h.row_bytes());
    }
    rmsnorm(h.f.data(), T, D, m.norm->v.data(), c.eps, xn.data());
    linear(xn.data(), T, D, *m.lm_head, logits);
    vtp_probe_buffer(pr, "logits", -1, "f32", T, V * 4);
}

}  // namespace dev

// ------------------------------------------------------------------------------ protocol

static int forward_cb(void *user, const int32_t *tokens, int64_t T, float *logits, float *residuals,
                      vtp_probes *probes, char *err, size_t errlen) {
    const dev::Engine *eng = (const dev::Engine *)user;
    try {
        for (int64_t t = 0; t < T; t++)
            if (tokens[t] < 0 || tokens[t] >= eng->m.cfg.vocab) {
                std::snprintf(err, errlen, "tokens: id %d at position %lld is outside [0, %lld)", tokens[t],
                              (long long)t, (long long)eng->m.cfg.vocab);
                return 1;
            }
        dev::forward(*eng, tokens, T, logits, residuals, probes);
        return 0;
    } catch (const std::exception &e) {
        std::snprintf(err, errlen, "forward: %s", e.what());
        return 1;
    }
}

static void usage(FILE *f) {
    std::fprintf(f,
                 "usage: devengine [--model DIR]\n"
                 "  Serves a Kimi-Linear checkpoint (config.json + *.safetensors) over vtlab's engine\n"
                 "  protocol on stdin/stdout. Model: --model DIR, else $VTP_MODEL.\n"
                 "  Knobs: DEV_BF16_STREAM=0|1, DEV_FAULT=none|scatter_row_bytes, DEV_THREADS=0..64;\n"
                 "  probes: VTP_PROBE=off|on|audit.\n");
}

int main(int argc, char **argv) {
    std::string dir;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--model") && i + 1 < argc) dir = argv[++i];
        else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else { std::fprintf(stderr, "devengine: unknown argument '%s'\n", argv[i]); usage(stderr); return 2; }
    }
    if (dir.empty() && std::getenv("VTP_MODEL")) dir = std::getenv("VTP_MODEL");
    if (dir.empty()) { std::fprintf(stderr, "devengine: no model: give --model DIR or set VTP_MODEL\n"); return 2; }

    // knobs: read from the environment, checked, reported back in the hello
    int r_stream = 0, r_fault = 0, r_threads = 0;
    const char *v_stream = vtp_knob_env("DEV_BF16_STREAM", "0", &r_stream);
    const char *v_fault = vtp_knob_env("DEV_FAULT", "none", &r_fault);
    const char *v_threads = vtp_knob_env("DEV_THREADS", "0", &r_threads);
    std::unique_ptr<dev::Engine> eng(new dev::Engine());
    if (std::strcmp(v_stream, "0") && std::strcmp(v_stream, "1")) {
        std::fprintf(stderr, "devengine: DEV_BF16_STREAM=%s: expected 0 or 1\n", v_stream);
        return 2;
    }
    if (std::strcmp(v_fault, "none") && std::strcmp(v_fault, "scatter_row_bytes")) {
        std::fprintf(stderr, "devengine: DEV_FAULT=%s: expected none or scatter_row_bytes\n", v_fault);
        return 2;
    }
    {
        char *end = nullptr;
        long n = std::strtol(v_threads, &end, 10);
        if (!*v_threads || *end || n < 0 || n > 64) {
            std::fprintf(stderr, "devengine: DEV_THREADS=%s: expected an integer in 0..64\n", v_threads);
            return 2;
        }
        eng->k.threads = (int)n;
    }
    eng->k.bf16_stream = !std::strcmp(v_stream, "1");
    eng->k.fault_scatter = !std::strcmp(v_fault, "scatter_row_bytes");

    char sha[65] = {0};
    try {
        dev::load_model(eng->m, dir);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "devengine: %s: %s\n", dir.c_str(), e.what());
        return 2;
    }
    if (vtp_model_sha256(dir.c_str(), sha) != 0) {
        std::fprintf(stderr, "devengine: %s: cannot hash the model files\n", dir.c_str());
        return 2;
    }
    const dev::Config &c = eng->m.cfg;
    std::string kinds(c.kind.begin(), c.kind.end());
    kinds += '/';
    for (int64_t i = 0; i < c.L; i++) kinds += c.is_moe(i) ? 'E' : 'D';

    const vtp_knob knobs[] = {
        {"DEV_BF16_STREAM", "bool", "0|1", "0", 1, v_stream, r_stream},
        {"DEV_FAULT", "enum", "none|scatter_row_bytes", "none", 1, v_fault, r_fault},
        {"DEV_THREADS", "int", "0..64", "0", 0, v_threads, r_threads},
    };
    static const char *const sites[] = {"residual.stream", "moe.gather", "moe.expert.y", "moe.scatter", "moe.combine",
                                        "logits"};
    const vtp_fault faults[] = {
        {"scatter_row_bytes", "DEV_FAULT", "moe.scatter",
         "the MoE scatter sizes rows from the stream dtype while copying f32 expert-output rows: with a bf16 stream "
         "every routed row is copied at half length and half stride"},
    };
    vtp_hello h;
    std::memset(&h, 0, sizeof h);
    h.engine = "devengine";
    h.version = "0.1.0";
    h.commit = DEVENGINE_COMMIT;
    h.model_sha256 = sha;
    h.vocab = c.vocab;
    h.hidden = c.D;
    h.n_layers = c.L;
    h.layer_kinds = kinds.c_str();
    h.knobs = knobs;
    h.n_knobs = (int)(sizeof knobs / sizeof knobs[0]);
    h.probe_sites = sites;
    h.n_probe_sites = (int)(sizeof sites / sizeof sites[0]);
    h.faults = faults;
    h.n_faults = 1;
    h.deterministic = 1;
    h.capture = 1;
    int rc = vtp_serve(stdin, stdout, &h, forward_cb, eng.get());
    return rc == 0 ? 0 : 1;
}
