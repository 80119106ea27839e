/*
 * paths.h — where vtlab finds what it did not get on the command line: its
 * shipped data (model configs, example experiments and ledger), the cache of
 * synthetic models, its own executable, and the files an experiment or a
 * ledger names.
 *
 * The rules (docs/experiments.md, "Paths"):
 *   - a path inside a file is relative to that file: an experiment's
 *     `model`, `model.synth`, `dataset.file` and `engine.cwd` to the
 *     experiment file's directory, a claim's `experiment` to the ledger
 *     directory's parent (specs/ beside experiments/); absolute paths are
 *     taken as written. Never the current directory: the same file means the
 *     same thing wherever vtlab is run from.
 *   - a `model.synth` that is not found next to the experiment and is named
 *     as vtlab ships it ("model/configs/NAME.json", its name in the source
 *     tree, or a bare "NAME.json") is the shipped config of that name.
 *   - shipped data: VTLAB_DATA_DIR; else PREFIX/share/vtlab for a vtlab
 *     installed as PREFIX/bin/vtlab (found from /proc/self/exe, so no path is
 *     compiled in); else the source tree a vtlab built in it runs from.
 *   - the synthetic-model cache: VTLAB_CACHE (`--cache DIR` sets it); else
 *     $XDG_CACHE_HOME/vtlab; else ~/.cache/vtlab. Never the current directory.
 */
#ifndef LAB_PATHS_H
#define LAB_PATHS_H

#include <stddef.h>

/* Where the shipped data lies, and in which layout. */
typedef struct lab_data_dir {
    char path[4096];
    int  source_tree;   /* 1: a source tree (model/configs/, experiments/, specs/);
                           0: an installed share/vtlab (configs/, experiments/, specs/) */
} lab_data_dir;

/* Finds the shipped data (rules above). LAB_EINPUT, saying where it looked,
 * when there is none (VTLAB_DATA_DIR naming a directory without the data is
 * that too, naming it). */
int lab_data_find(lab_data_dir *d, char *err, size_t errlen);

/* The shipped item `what` ("configs", "experiments", "specs") of d into out:
 * DATA/configs or TREE/model/configs, and so on. */
void lab_data_item(const lab_data_dir *d, const char *what, char *out, size_t outlen);

/* The synthetic-model cache directory (rules above) into out; not created.
 * LAB_EINPUT when neither VTLAB_CACHE, XDG_CACHE_HOME nor HOME names one. */
int lab_cache_dir(char *out, size_t outlen, char *err, size_t errlen);

/* This process's executable (/proc/self/exe) into out; LAB_EIO when it cannot
 * be read. */
int lab_self_exe(char *out, size_t outlen, char *err, size_t errlen);

/* p as the file `from` names it: absolute p as written; a relative p joined
 * to from's directory ("experiments/a.json" + "d.ids" -> "experiments/d.ids";
 * from without a '/' leaves p as it is). Caller frees; NULL when out of
 * memory. */
char *lab_path_beside(const char *from, const char *p);

/* p as a ledger at ledger_dir names it (a claim's `experiment`): absolute p
 * as written; a relative p joined to the ledger directory's parent, so that
 * specs/ names experiments/x.json beside it ("specs" + "experiments/x.json"
 * -> "experiments/x.json"; "/r/specs/" -> "/r/experiments/x.json"). Caller
 * frees; NULL when out of memory. */
char *lab_path_in_ledger(const char *ledger_dir, const char *p);

/* The shipped config an experiment's model.synth names, when the name is one
 * vtlab ships under ("model/configs/NAME.json" or "NAME.json") and the data
 * holds it: 1 with the path in out; else 0. */
int lab_shipped_config(const char *name, char *out, size_t outlen);

#endif
