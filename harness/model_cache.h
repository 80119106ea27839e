/*
 * model_cache.h — the directory holding an experiment's model: a user's
 * checkpoint dir as it is, or a synthetic model built once into the cache
 * build/models/<key>/ and reused by every later experiment with the same key.
 */
#ifndef LAB_MODEL_CACHE_H
#define LAB_MODEL_CACHE_H

#include <stddef.h>

#include "experiment.h"

/* Sets *dir (caller frees) to the model directory of e: the checkpoint dir
 * (LAB_EINPUT naming e->path when it does not exist), or the synth cache
 * build/models/<16 hex>/ keyed by the sha256 of the synth config's bytes,
 * the seed, the dtype and vt_synth_version(), built by vt_synth on first
 * use (files appear whole or not at all). An unreadable or invalid synth
 * config is LAB_EINPUT naming "<e->path>: model.synth". */
int lab_model_dir(const lab_experiment *e, char **dir, char *err, size_t errlen);

#endif
