/* spec_int.h - helpers shared by the decoders of src/spec (spec.c, plan.c) and nothing else. */
#ifndef LOOM_SPEC_INT_H
#define LOOM_SPEC_INT_H

#include <jansson.h>

/* The first key of obj that is in neither known nor extra (NULL-terminated lists; extra may be
 * NULL), or NULL when every key is known. Each decoder reports it in its own error form. */
const char *loom__spec_unknown_key(json_t *obj, const char *const *known, const char *const *extra);

#endif
