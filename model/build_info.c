/* build_info.c — the code version baked in at build time (see the Makefile). */
#include "vt.h"

#include "build_info.h"

#define VT_STR_(x) #x
#define VT_STR(x) VT_STR_(x)

const char *vt_build_info(void) {
    return VT_GIT_COMMIT "|dirty=" VT_STR(VT_GIT_DIRTY) "|" VT_COMPILER "|" VT_BUILD_FLAGS;
}
const char *vt_build_commit(void) { return VT_GIT_COMMIT; }
int         vt_build_dirty(void) { return VT_GIT_DIRTY; }
const char *vt_build_compiler(void) { return VT_COMPILER; }
const char *vt_build_flags(void) { return VT_BUILD_FLAGS; }
