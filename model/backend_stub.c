/* backend_stub.c — what a CPU-only build (no nvcc) answers for the CUDA backend. */
#include <stdio.h>

#include "backend.h"
#include "vt.h"

#ifndef VT_HAVE_CUDA
int vt_cuda_probe_device(char *err, size_t errlen) {
    snprintf(err, errlen, "VT_BACKEND=cuda: no CUDA device (this build has no CUDA backend: nvcc was not found at build time)");
    return VT_STATUS_UNSUPPORTED;
}
#endif
