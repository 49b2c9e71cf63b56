/* loomd_token.h - `loomd token ...` (token.c). */
#ifndef LOOMD_TOKEN_H
#define LOOMD_TOKEN_H

/* argv[0] is "token"; returns the exit status. */
int loomd_token_main(int argc, char **argv);

#endif
