/*
 * init.h — `vtlab init [DIR]`: the files a project needs to use vtlab beside
 * its own engine, in its own repository and CI.
 *
 *   experiments/example.json          an experiment on an engine command (`vtlab engine`,
 *                                     vtlab's own model, so it runs at once), its fields
 *                                     explained in its "notes"
 *   specs/README.md, specs/claims/, specs/defects/   the ledger (docs/specs.md)
 *   .gitignore                        results.db and the report are made, not committed
 *                                     (an existing .gitignore gets the lines it lacks appended)
 *   .github/workflows/vtlab-nightly.yml   GitHub Actions: `vtlab nightly` every night,
 *                                     junit.xml published, results.db kept between nights
 *   .gitlab/vtlab-nightly.yml         the same job for GitLab CI, and a .gitlab-ci.yml that
 *                                     includes it (only when there is none: else the line to add
 *                                     is printed)
 *
 * Nothing is overwritten: when any file it would write exists, init writes
 * nothing and says which (LAB_EINPUT). Each file appears whole or not at all.
 */
#ifndef LAB_INIT_H
#define LAB_INIT_H

#include <stddef.h>
#include <stdio.h>

/* Scaffolds the project in dir (made when missing); what was written, and
 * what to run next, to out. */
int lab_init(const char *dir, FILE *out, char *err, size_t errlen);

#endif
