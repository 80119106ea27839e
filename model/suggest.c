/*
 * suggest.c — "did you mean": the one edit-distance helper (vt.h).
 *
 * Every misspelling the lab answers with a suggestion goes through here:
 * knob names (knobs.c, an engine's declared knobs), commands, option names
 * and enumerated option values (harness/help.c), `ack` kinds. One rule, so
 * that `vtlab rnu` and VT_KIMI_BF16_STRAEM are judged alike:
 *
 *   - distance: optimal string alignment (Levenshtein with a swap of two
 *     neighbours costing 1: "rnu" is one edit from "run", not two), letters
 *     compared without case ("finished" finds FINISHED);
 *   - close enough: at most 1 edit for a word of up to 5 letters, 2 up to 8,
 *     3 up to 11, then 4 (the knobs' bound before this file); a word of 1 or
 *     2 letters is too short to guess from;
 *   - or a beginning: a word of 2 or more letters that starts a candidate
 *     ("perf" for performance) is suggested too, ranked after a candidate one
 *     edit away and before one two edits away; of several, the shortest;
 *   - otherwise no suggestion (NULL): a far-off guess misleads more than none;
 *     nor when the word is one of the candidates.
 */
#include "model/vt.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_LEN 63   /* longer words are never suggested for (no name is so long) */

int vt_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > NAME_MAX_LEN || lb > NAME_MAX_LEN) return 99;
    int d[NAME_MAX_LEN + 1][NAME_MAX_LEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int c = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

/* The most edits a word of n letters may be from what it is taken for. */
static int max_edits(size_t n) { return n <= 2 ? 0 : n <= 5 ? 1 : n <= 8 ? 2 : n <= 11 ? 3 : 4; }

static int starts(const char *s, const char *prefix) {
    for (; *prefix; s++, prefix++)
        if (tolower((unsigned char)*s) != tolower((unsigned char)*prefix)) return 0;
    return 1;
}

/* A candidate's rank for word: 2 * edits when close enough, 3 for a
 * beginning (after one edit, before two), -1 when not to be suggested. */
static int rank(const char *word, const char *cand) {
    size_t n = strlen(word);
    int d = vt_edit_distance(word, cand);
    if (d <= max_edits(n)) return 2 * d;
    if (n >= 2 && strlen(cand) > n && starts(cand, word)) return 3;
    return -1;
}

void vt_suggest_init(vt_suggester *s, const char *word) {
    s->word = word;
    s->best = NULL;
    s->rank = -1;
}

/* rank -2: the word is one of the candidates, so nothing is to be suggested */
void vt_suggest_offer(vt_suggester *s, const char *candidate) {
    if (!candidate || !*candidate || !s->word || !*s->word || s->rank == -2) return;
    if (!strcmp(candidate, s->word)) {
        s->best = NULL;
        s->rank = -2;
        return;
    }
    int r = rank(s->word, candidate);
    if (r < 0) return;
    /* the lower rank; of equals the first offered, of equal beginnings the shortest */
    if (!s->best || r < s->rank || (r == s->rank && r == 3 && strlen(candidate) < strlen(s->best))) {
        s->best = candidate;
        s->rank = r;
    }
}

const char *vt_suggest(const char *word, const char *const *candidates, size_t n) {
    vt_suggester s;
    vt_suggest_init(&s, word);
    for (size_t i = 0; i < n; i++) vt_suggest_offer(&s, candidates[i]);
    return s.best;
}

const char *vt_suggest_list(const char *word, const char *list, char *out, size_t outlen) {
    char copy[1024];
    if (!list || strlen(list) >= sizeof copy || outlen == 0) return NULL;
    snprintf(copy, sizeof copy, "%s", list);
    vt_suggester s;
    vt_suggest_init(&s, word);
    for (char *p = copy, *bar; p; p = bar ? bar + 1 : NULL) {
        bar = strchr(p, '|');
        if (bar) *bar = '\0';
        vt_suggest_offer(&s, p);
    }
    if (!s.best) return NULL;
    snprintf(out, outlen, "%s", s.best);
    return out;
}
