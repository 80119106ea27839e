/*
 * model_cache.h — the directory holding an experiment's model: a user's
 * checkpoint dir as it is, or a synthetic model built once into the cache
 * CACHE/models/<key>/ and reused by every later experiment with the same key;
 * and the model's content hash, which a run's identity holds, kept in a
 * sidecar beside a cache entry (the cache's reader and writer in one file).
 * CACHE is lab_cache_dir (paths.h): VTLAB_CACHE, else $XDG_CACHE_HOME/vtlab,
 * else ~/.cache/vtlab — never the current directory, so running vtlab in a
 * repository writes nothing there but what it was asked to (results.db, a
 * report).
 */
#ifndef LAB_MODEL_CACHE_H
#define LAB_MODEL_CACHE_H

#include <stddef.h>

#include "experiment.h"

/* Sets *dir (caller frees) to the model directory of e: the checkpoint dir
 * (LAB_EINPUT naming e->path when it does not exist), or the synth cache
 * CACHE/models/<16 hex>/ keyed by the sha256 of the synth config's bytes,
 * the seed, the dtype and vt_synth_version(), built by vt_synth on first
 * use (files appear whole or not at all). An unreadable or invalid synth
 * config is LAB_EINPUT naming "<e->path>: model.synth". */
int lab_model_dir(const lab_experiment *e, char **dir, char *err, size_t errlen);

/* CACHE/models into out (not created); LAB_EINPUT when no cache can be named. */
int lab_model_cache_root(char *out, size_t outlen, char *err, size_t errlen);
/* 1 when dir (as vtlab names its entries) lies in CACHE/models/: a directory
 * vtlab owns, where a model's hash may be kept beside it. */
int lab_model_cache_owns(const char *dir);
/* The cache entry whose model hash is sha256 (`vtlab rerun` finds a run's
 * model by its hash): *dir (caller frees), or NULL when none is cached. */
int lab_model_cache_find(const char *sha256, char **dir, char *err, size_t errlen);

/* sha256 (64 hex + NUL into out) of config.json then every *.safetensors
 * file of dir, sorted by name. For a dir under CACHE/models/ (vtlab's own
 * synth cache, above) the hash is cached in the sidecar dir/model.sha256 and
 * trusted only while every hashed file's size and mtime are unchanged; a
 * user's checkpoint dir is never written. No *.safetensors is LAB_EINPUT;
 * an unreadable file LAB_EIO. */
int lab_model_sha256(const char *dir, char out[65], char *err, size_t errlen);

#endif
