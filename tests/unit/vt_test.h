/* vt_test.h — what every unit test includes: cmocka and small helpers. */
#ifndef VT_TEST_H
#define VT_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Asserts that a status is VT_OK and prints the error message if not. */
#define VT_ASSERT_OK(rc, err)                                                   \
    do {                                                                        \
        int rc_ = (rc);                                                         \
        if (rc_ != 0) fail_msg("status %d: %s", rc_, (err).msg);                \
    } while (0)

/* Asserts that haystack contains needle, printing both when it does not. */
#define VT_ASSERT_CONTAINS(haystack, needle)                                    \
    do {                                                                        \
        if (!strstr((haystack), (needle)))                                      \
            fail_msg("expected \"%s\" in \"%s\"", (needle), (haystack));        \
    } while (0)

#endif
