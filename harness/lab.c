/* lab.c — dispatch of the lab commands (see lab.h). */
#include "lab.h"

#include <stdio.h>

int vt_lab_main(const char *cmd, int argc, char **argv, int *handled) {
    (void)cmd; (void)argc; (void)argv;
    *handled = 0;
    return 0;
}

void vt_lab_usage(void) {}
