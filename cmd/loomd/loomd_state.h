/* loomd_state.h - loomd's loom-state hooks (state.c). */
#ifndef LOOMD_STATE_H
#define LOOMD_STATE_H

#include "loom/server.h"

typedef struct loomd_state loomd_state;

/* Parse one --state [NODE=]SOCK; creates *st on first use. 0, or -1 after a message. */
int loomd_state_add(loomd_state **st, const char *arg);
/* Point cfg's state hooks at t (NULL: leave them unset). */
void loomd_state_wire(loomd_state *t, loom_server_cfg *cfg);
void loomd_state_free(loomd_state *t);

#endif
