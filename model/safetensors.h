/*
 * safetensors.h — reading and writing safetensors checkpoints.
 *
 * Format: 8-byte little-endian header length N, then N bytes of JSON mapping
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the data section that follows the header), plus an optional
 * "__metadata__" object of string -> string. A checkpoint is a directory with
 * model.safetensors, or shards listed by model.safetensors.index.json
 * ("weight_map": name -> shard file).
 *
 * The reader maps files read-only and trusts nothing: the header length must
 * fit the file and a fixed bound, every dtype string must be known, every
 * shape x element size must equal the byte range, every range must lie in the
 * data section and no two may overlap. Every error names the file and, where
 * there is one, the tensor.
 */
#ifndef VT_SAFETENSORS_H
#define VT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define VT_ST_MAX_DIMS 8
#define VT_ST_MAX_HEADER ((uint64_t)100 << 20)   /* header JSON larger than 100 MiB is refused */

typedef struct vt_st_entry {
    char       *name;                    /* owned */
    vt_dtype    dtype;
    int         ndim;                    /* 0..VT_ST_MAX_DIMS (0: a scalar) */
    int64_t     shape[VT_ST_MAX_DIMS];
    uint64_t    begin, end;              /* byte range within the data section */
    const void *data;                    /* into the mapping; NULL for a parsed-only header */
    int         file;                    /* index of the shard holding it */
} vt_st_entry;

typedef struct vt_st_header {
    vt_st_entry *entries;                /* in file order of data_offsets */
    size_t       n;
    size_t       n_metadata;             /* entries in __metadata__ */
} vt_st_header;

/* Renders a name read from a file for a one-line message: printable ASCII as
 * is, other bytes as \xNN, cut with "..." past ~160 characters (names are
 * untrusted: they may hold newlines or escape sequences). buf: >= 176 bytes. */
const char *vt_st_show_name(const char *s, char *buf, size_t cap);

/* Parses and validates a header. json need not be NUL-terminated. data_len is
 * the size of the data section (file size - 8 - header length); fname is used
 * in messages only. On success fills *out (free with vt_st_header_free). This
 * function is the fuzz target for the checkpoint reader. */
int  vt_st_parse_header(const char *json, size_t json_len, uint64_t data_len, const char *fname,
                        vt_st_header *out, vt_err *err);
void vt_st_header_free(vt_st_header *h);

/* A checkpoint: one or more mapped files. */
typedef struct vt_ckpt vt_ckpt;

/* path is a directory (model.safetensors.index.json, else model.safetensors)
 * or a single .safetensors file. */
int  vt_ckpt_open(const char *path, vt_ckpt **out, vt_err *err);
void vt_ckpt_close(vt_ckpt *c);
/* Reads every file into anonymous memory (2 MiB huge pages where the kernel
 * allows) and points the entries there, instead of at the files' mappings
 * (VTLAB_WEIGHTS=load): the same bytes; on this project's 2-core VM a decode
 * step streamed them 15-20% faster than the page cache's 4 KiB pages. RSS is
 * the same either way (the mapping's pages count once touched); the page
 * cache may keep a second copy until the kernel needs the memory. */
int  vt_ckpt_load(vt_ckpt *c, vt_err *err);
/* After vt_ckpt_load: makes the loaded bytes writable (on = 1), so that the
 * model can rearrange its matrices in place (tensor.h's panels), or
 * read-only again (on = 0). Refused for a file that is only mapped. */
int  vt_ckpt_set_writable(vt_ckpt *c, int on, vt_err *err);
size_t             vt_ckpt_count(const vt_ckpt *c);
const vt_st_entry *vt_ckpt_entry(const vt_ckpt *c, size_t i);
const vt_st_entry *vt_ckpt_find(const vt_ckpt *c, const char *name);   /* NULL if absent */
const char        *vt_ckpt_file_name(const vt_ckpt *c, int file);      /* path of shard `file` */
/* What lists the checkpoint's tensors: the index file of a sharded checkpoint,
 * else the one .safetensors file. A tensor that is absent is absent from it. */
const char        *vt_ckpt_source(const vt_ckpt *c);
size_t             vt_ckpt_nbytes(const vt_ckpt *c, const vt_st_entry *e);  /* end - begin */

/* Writer. Tensors are declared first (name, dtype, shape), which fixes the
 * header; then the data of each is streamed in declaration order. The file is
 * written to PATH.tmp and renamed onto PATH by finish, so a failed or
 * interrupted write never leaves a truncated checkpoint. Output is
 * byte-identical for the same declarations and data on any machine. */
typedef struct vt_st_writer vt_st_writer;

int  vt_st_writer_new(vt_st_writer **out, vt_err *err);
int  vt_st_writer_meta(vt_st_writer *w, const char *key, const char *value, vt_err *err);
int  vt_st_writer_declare(vt_st_writer *w, const char *name, vt_dtype dtype, int ndim,
                          const int64_t *shape, vt_err *err);
/* Writes the header; after this no more declarations. */
int  vt_st_writer_begin(vt_st_writer *w, const char *path, vt_err *err);
/* Data of the next declared tensor: exactly its byte size, in its dtype. */
int  vt_st_writer_put(vt_st_writer *w, const void *data, size_t nbytes, vt_err *err);
/* All tensors written: flush, fsync, rename. */
int  vt_st_writer_finish(vt_st_writer *w, vt_err *err);
/* Frees the writer; removes the temporary file if finish did not succeed. */
void vt_st_writer_free(vt_st_writer *w);

#endif
