/*
 * bench_cuda.c — `bench_cuda CONFIG OUT.json [T [BATCH]]`: the full-size CUDA
 * benchmark (model/cuda/bench.cu) as a program. Not part of libvtmodel.a (the
 * Makefile archives only the .cu files of model/cuda); scripts/gpu-check.sh links it
 * against build/libvtmodel.a. Exit status: 0, 2 for bad input or no device, 1
 * otherwise.
 */
#include <stdio.h>
#include <stdlib.h>

#include "model/backend.h"

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: bench_cuda CONFIG.json OUT.json [PREFILL_T=2048 [BATCH=32]]\n");
        return 2;
    }
    long long T = argc > 3 ? atoll(argv[3]) : 2048, B = argc > 4 ? atoll(argv[4]) : 32;
    char err[1024];
    int rc = vt_cuda_bench(argv[1], T, B, argv[2], stdout, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_cuda: %s\n", err);
        return vt_exit_code(rc);
    }
    printf("bench_cuda: wrote %s\n", argv[2]);
    return 0;
}
