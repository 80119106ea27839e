/* backend_stub.c — what a CPU-only build (no nvcc) answers for the CUDA backend. */
#include <stdio.h>

#include "backend.h"
#include "model.h"

#ifndef VT_HAVE_CUDA
#define NO_CUDA_MSG "VT_BACKEND=cuda: no CUDA device (this build has no CUDA backend: nvcc was not found at build time)"

int vt_cuda_probe_device(char *err, size_t errlen) {
    snprintf(err, errlen, NO_CUDA_MSG);
    return VT_STATUS_UNSUPPORTED;
}

int vt_cuda_session_open(vt_session *s, char *err, size_t errlen) {
    (void)s;
    return vt_cuda_probe_device(err, errlen);
}

void vt_cuda_session_free(vt_session *s) { (void)s; }

int vt_cuda_session_forward(vt_session *s, const int32_t *tokens, int64_t T, int reset, float *logits, char *err,
                            size_t errlen) {
    (void)s; (void)tokens; (void)T; (void)reset; (void)logits;
    return vt_cuda_probe_device(err, errlen);
}

void vt_cuda_model_free(vt_model *m) { (void)m; }

int vt_cuda_moe_layer(vt_session *s, int layer, const float *x, int64_t N, float *out, struct vt_moe_trace *trace,
                      char *err, size_t errlen) {
    (void)s; (void)layer; (void)x; (void)N; (void)out; (void)trace;
    return vt_cuda_probe_device(err, errlen);
}

int vt_cuda_device_name(char *out, size_t outlen, char *err, size_t errlen) {
    if (outlen) out[0] = '\0';
    return vt_cuda_probe_device(err, errlen);
}

int vt_cuda_bench(const char *config_path, int64_t prefill_T, int64_t batch, const char *json_path, FILE *log,
                  char *err, size_t errlen) {
    (void)config_path; (void)prefill_T; (void)batch; (void)json_path; (void)log;
    return vt_cuda_probe_device(err, errlen);
}
#endif
