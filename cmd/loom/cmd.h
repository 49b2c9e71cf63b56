/* cmd.h - the subcommands of `loom`, one file each. argv[0] is the subcommand's name. */
#ifndef LOOM_CMD_H
#define LOOM_CMD_H

int loom_cmd_place(int argc, char **argv);
int loom_cmd_sim(int argc, char **argv);
int loom_cmd_micro(int argc, char **argv);
int loom_cmd_sync(int argc, char **argv);
int loom_cmd_demo(int argc, char **argv);
int loom_cmd_bench(int argc, char **argv);

#endif
