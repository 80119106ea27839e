/*
 * backend.cu — the CUDA/cuBLAS backend (issue 7 fills in the forward pass).
 * For now: device discovery and a cuBLAS handle, so that the build proves it
 * compiles and links against CUDA for sm_80 and sm_90, and so that
 * VT_BACKEND=cuda on a machine without a GPU fails with "no CUDA device".
 */
#include <cstdio>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "model/backend.h"
#include "model/vt.h"

extern "C" int vt_cuda_probe_device(char *err, size_t errlen) {
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        snprintf(err, errlen, "VT_BACKEND=cuda: no CUDA device (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return VT_STATUS_UNSUPPORTED;
    }
    cublasHandle_t h;
    cublasStatus_t cs = cublasCreate(&h);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "VT_BACKEND=cuda: cublasCreate failed (status %d)", (int)cs);
        return VT_STATUS_UNSUPPORTED;
    }
    cublasDestroy(h);
    return VT_STATUS_OK;
}
