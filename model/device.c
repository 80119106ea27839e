/* device.c — the name of the machine a backend runs on, for run provenance. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "vt.h"

int vt_device_name(const char *backend, char *out, size_t outlen) {
    if (backend && !strcmp(backend, "cuda")) {
        char name[256], err[256];
        if (vt_cuda_device_name(name, sizeof name, err, sizeof err) == 0) {
            snprintf(out, outlen, "cuda: %s", name);
            return VT_STATUS_OK;
        }
        snprintf(out, outlen, "cuda: (no device)");
        return VT_STATUS_UNSUPPORTED;
    }
    snprintf(out, outlen, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return VT_STATUS_OK;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(out, outlen, "cpu: %s", c);
        break;
    }
    fclose(f);
    return VT_STATUS_OK;
}
