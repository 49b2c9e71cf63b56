/* spec_int.h - helpers shared by the decoders of src/spec (spec.c, plan.c) and nothing else. */
#ifndef LOOM_SPEC_INT_H
#define LOOM_SPEC_INT_H

#include <jansson.h>

/* The first key of obj that is in neither known nor extra (NULL-terminated lists; extra may be
 * NULL), or NULL when every key is known. Each decoder reports it in its own error form. */
const char *loom__spec_unknown_key(json_t *obj, const char *const *known, const char *const *extra);

/* The name in known or extra nearest to key (Levenshtein distance, letters compared without
 * case) when it is near enough to be a likely misspelling (at most 2 edits, or a third of key's
 * length for longer keys), else NULL: for "unknown field (did you mean ...?)". */
const char *loom__spec_nearest(const char *key, const char *const *known, const char *const *extra);

#endif
