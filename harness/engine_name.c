/*
 * engine_name.c — the one wording of a run's engine (engine_name.h).
 */
#include "engine_name.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

/* Copies src (NULL reads as "") into dst[len], every control character as
 * '?', cut at a character boundary so that a cut UTF-8 sequence never ends
 * the copy. The text comes from an engine's hello: untrusted. */
static void copy_shown(char *dst, size_t len, const char *src) {
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t n = 0;
    while (*p && n + 1 < len) {
        dst[n++] = (*p < 0x20 || *p == 0x7f) ? '?' : (char)*p;
        p++;
    }
    if (*p) {   /* cut: drop the last character when only part of it fits */
        size_t k = n;
        while (k > 0 && ((unsigned char)dst[k - 1] & 0xC0) == 0x80) k--;   /* its continuation bytes */
        unsigned char lead = k > 0 ? (unsigned char)dst[k - 1] : 0;
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (k > 0 && n - (k - 1) < need) n = k - 1;
    }
    dst[n] = 0;
}

static const char *col(sqlite3_stmt *s, int i) {
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : "";
}

void lab_engine_name_read(sqlite3_stmt *s, int i, lab_engine_name *n) {
    memset(n, 0, sizeof *n);
    int kind = sqlite3_column_int(s, i);   /* 0 builtin, 1 a hello, -1 a hello that is not JSON */
    const char *model = col(s, i + 4);
    n->builtin = kind == 0;
    if (n->builtin) {
        copy_shown(n->name, sizeof n->name, "builtin");
        copy_shown(n->commit, sizeof n->commit, col(s, i + 5));
    } else if (kind < 0 || !*col(s, i + 1)) {
        copy_shown(n->name, sizeof n->name, "(unreadable hello)");
    } else {
        copy_shown(n->name, sizeof n->name, col(s, i + 1));
        copy_shown(n->version, sizeof n->version, col(s, i + 2));
        copy_shown(n->commit, sizeof n->commit, col(s, i + 3));
    }
    copy_shown(n->model_sha256, sizeof n->model_sha256, *model ? model : col(s, i + 6));
}

const char *lab_engine_label(const lab_engine_name *n, char *buf, size_t len) {
    snprintf(buf, len, "%s%s%s", n->name, *n->version ? " " : "", n->version);
    return buf;
}

const char *lab_engine_describe(const lab_engine_name *n, char *buf, size_t len) {
    char label[160];
    lab_engine_label(n, label, sizeof label);
    snprintf(buf, len, "%s%s%s%s%.12s", label, *n->commit ? ", commit " : "", n->commit,
             *n->model_sha256 ? ", model " : "", n->model_sha256);
    return buf;
}

cJSON *lab_engine_json(const lab_engine_name *n) {
    char label[160];
    cJSON *o = cJSON_CreateObject();
    int ok = o && cJSON_AddStringToObject(o, "name", n->name) && cJSON_AddStringToObject(o, "version", n->version) &&
             cJSON_AddStringToObject(o, "commit", n->commit) &&
             cJSON_AddStringToObject(o, "model_sha256", n->model_sha256) &&
             cJSON_AddBoolToObject(o, "builtin", n->builtin) &&
             cJSON_AddStringToObject(o, "label", lab_engine_label(n, label, sizeof label));
    if (!ok) { cJSON_Delete(o); return NULL; }
    return o;
}
