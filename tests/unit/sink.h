/* sink.h - a FILE the unit tests print into (open_memstream), and what it received. */
#ifndef LOOM_TEST_SINK_H
#define LOOM_TEST_SINK_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct sink {
        FILE *f;
        char *buf;
        size_t len;
} sink;

static inline void sink_open(sink *s)
{
        s->buf = NULL;
        s->len = 0;
        s->f = open_memstream(&s->buf, &s->len);
        cr_assert_not_null(s->f);
}

/* What it received so far, NUL-terminated; the stream stays open. */
static inline const char *sink_text(sink *s)
{
        fflush(s->f);
        return s->buf;
}

static inline void sink_close(sink *s)
{
        fclose(s->f);
        free(s->buf);
}

/* Close the stream and hand over what it received (the caller frees it). */
static inline char *sink_take(sink *s)
{
        fclose(s->f);
        return s->buf;
}

#endif
