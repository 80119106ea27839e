/*
 * backend.h — the plain-C interface of the compute backends. The CPU backend
 * is the reference (model/ C files); the CUDA backend (model/cuda/ .cu files) implements
 * these functions behind extern "C" when nvcc is present at build time.
 */
#ifndef VT_BACKEND_H
#define VT_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 (VT_OK) when a CUDA device is usable; else VT_STATUS_UNSUPPORTED with
 * "no CUDA device" (or why not) in err. Builds without nvcc always say so. */
int vt_cuda_probe_device(char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
