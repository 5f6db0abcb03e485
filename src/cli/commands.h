/* commands.h: the llaisys-cli subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand name), prints its own --help, and returns the process exit code. */
#ifndef LLAISYS_CLI_COMMANDS_H
#define LLAISYS_CLI_COMMANDS_H

int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int cmd_template(int argc, char **argv);   /* cmd_template.c */

#endif
