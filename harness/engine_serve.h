/*
 * engine_serve.h — `vtlab engine`: the builtin model as an engine process
 * speaking docs/engine-protocol.md on in/out.
 */
#ifndef LAB_ENGINE_SERVE_H
#define LAB_ENGINE_SERVE_H

#include <stddef.h>
#include <stdio.h>

/* Loads model_dir (NULL: $VTP_MODEL) under the knobs of the environment,
 * writes the hello and answers requests until in ends. LAB_OK at a clean
 * end; LAB_EINPUT (a bad model, knob or backend: nothing was served) or
 * another status with err filled. */
int lab_engine_serve(const char *model_dir, FILE *in, FILE *out, char *err, size_t errlen);

#endif
