/*
 * backend.h — the plain-C interface of the compute backends. The CPU backend
 * is the reference (model/ C files); the CUDA backend (model/cuda/ .cu files) implements
 * these functions behind extern "C" when nvcc is present at build time, and
 * model/backend_stub.c answers "no CUDA device" for each of them otherwise.
 *
 * A CUDA session (VT_BACKEND=cuda) is an ordinary vt_session whose `cuda`
 * field holds the device state: forward.c's prefill and decode hand it here,
 * and the device code records the same probes (vt_probe_copy /
 * vt_probe_buffer) and fills the same residual capture as the CPU. The device
 * copies of the weights belong to the model (vt_model.cuda), uploaded once
 * per weight dtype and shared by every session on that model.
 */
#ifndef VT_BACKEND_H
#define VT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 (VT_OK) when a CUDA device is usable; else VT_STATUS_UNSUPPORTED with
 * "no CUDA device" (or why not) in err. Builds without nvcc always say so. */
int vt_cuda_probe_device(char *err, size_t errlen);

/* Opens the device side of session s (s->k, s->stream_dtype and
 * s->expert_dtype already resolved): uploads the model's weights if this is
 * the first session that needs them in this dtype, allocates the caches, and
 * sets s->cuda. Errors: VT_STATUS_UNSUPPORTED (no device), NOMEM, INTERNAL. */
int  vt_cuda_session_open(vt_session *s, char *err, size_t errlen);
/* Releases s->cuda (safe when NULL). */
void vt_cuda_session_free(vt_session *s);
/* Runs tokens[0..T) on the device: from empty caches when reset (prefill),
 * else appended to the cached state (decode). logits: [T, vocab] f32 or NULL. */
int  vt_cuda_session_forward(vt_session *s, const int32_t *tokens, int64_t T, int reset, float *logits,
                             char *err, size_t errlen);
/* Releases the model's device weights (safe when m has none). */
void vt_cuda_model_free(vt_model *m);

/* The MoE block of one layer on the device, for the tests: x [N, hidden] f32
 * on the host in, out [N, hidden] f32 on the host out; trace (may be NULL) as
 * vt_moe_forward fills it (struct vt_moe_trace, model.h). */
struct vt_moe_trace;
int vt_cuda_moe_layer(vt_session *s, int layer, const float *x, int64_t N, float *out, struct vt_moe_trace *trace,
                      char *err, size_t errlen);

/* The device's name ("NVIDIA H200"), or why there is none. */
int vt_cuda_device_name(char *out, size_t outlen, char *err, size_t errlen);

/* Benchmark on a synthetic full-size config with bf16 weights generated on
 * the device (no checkpoint): prefill tokens/s at T=prefill_T, decode tokens/s
 * at batch 1 and at batch `batch`, achieved TFLOP/s and HBM GB/s against the
 * device's peak. Writes a JSON object to json_path and a summary to `log`
 * (may be NULL). */
int vt_cuda_bench(const char *config_path, int64_t prefill_T, int64_t batch, const char *json_path, FILE *log,
                  char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
