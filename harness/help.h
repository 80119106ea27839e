/*
 * help.h — the one table of vtlab's commands (help.c): per command its
 * synopsis, every option with its default, what it does, its exit codes and
 * two examples. Everything that describes the command line is made from it:
 * `vtlab --help` (and so the man page, scripts/usage2man.sh), `vtlab CMD
 * --help`, `vtlab help [CMD]`, docs/cli.md (`vtlab help --markdown`), and the
 * "did you mean" for commands, options and enumerated option values. lab.c's
 * option parser accepts exactly the options this table lists for a command,
 * so the two cannot drift; the model commands (main.c) and localize
 * (localize.c) parse their own, and tests/cli/test_help.sh checks that each
 * accepts every option listed here.
 */
#ifndef LAB_HELP_H
#define LAB_HELP_H

#include <stdio.h>

#define LAB_HELP_MAX_OPTS 14

typedef struct lab_help_opt {
    const char *name;     /* "--db"; NULL ends the list */
    const char *arg;      /* the value's placeholder ("PATH"); NULL: a flag */
    const char *def;      /* the default as the user meets it ("results.db", "off"), or "required" */
    const char *values;   /* the allowed values, '|'-separated, when they are a fixed set; else NULL */
    const char *doc;
} lab_help_opt;

typedef struct lab_help_cmd {
    const char  *name;
    int          section;      /* index into the usage's sections (help.c) */
    const char  *args;         /* positional arguments ("EXPERIMENT.json", "[DIR]", "RUN..."), "" for none */
    const char  *synopsis;     /* NULL: NAME ARGS and the options; else these forms, '\n'-separated */
    const char  *summary;      /* what it does, for the usage (lower case, no final stop) */
    const char  *about;        /* more, for CMD --help and docs/cli.md; NULL: none */
    lab_help_opt opts[LAB_HELP_MAX_OPTS];
    const char  *exits[3];     /* what exit status 0, 1 and 2 mean */
    const char  *examples[2];  /* command lines that work (from the repository root) */
} lab_help_cmd;

int                 lab_help_count(void);
const lab_help_cmd *lab_help_at(int i);
/* The command named name, or NULL. */
const lab_help_cmd *lab_help_find(const char *name);
/* Command c's option named opt ("--db"), or NULL. */
const lab_help_opt *lab_help_option(const lab_help_cmd *c, const char *opt);

/* `vtlab --help`: every command, by section, one entry each. */
void lab_help_usage(FILE *out);
/* `vtlab CMD --help`: its first line "usage: vtlab CMD", then the synopsis,
 * options with defaults, exit status and examples. -1 when there is no such
 * command (nothing printed). */
int  lab_help_command(FILE *out, const char *name);
/* docs/cli.md: every command as `vtlab CMD --help` says it, in markdown. */
void lab_help_markdown(FILE *out);

/* The errors, on stderr, each returning the exit status 2:
 * "vtlab: unknown command "X" (did you mean Y?); `vtlab help` lists the commands" */
int lab_help_unknown_command(const char *cmd);
/* An argument cmd does not take: an unknown option (with the option of cmd
 * it may be a misspelling of) or a stray argument. */
int lab_help_bad_argument(const char *cmd, const char *arg);
/* When option opt of cmd has a fixed set of values (the table's) and value
 * is not one of them: "vtlab CMD: OPT: expected one of A, B or C, got "V"
 * (did you mean B?)" on stderr, and 2; else 0. */
int lab_help_check_value(const char *cmd, const char *opt, const char *value);
/* The same message for any value (what: what it is the value of, such as
 * "--format" or "the kind of KEY"; values '|'-separated); returns 2. */
int lab_help_value_error(const char *cmd, const char *what, const char *value, const char *values);

#endif
