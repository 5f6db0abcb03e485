/* main.c: llaisys-cli entry point; dispatches to a subcommand (see commands.h). */
#include <stdio.h>
#include <string.h>

#include "commands.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

static const struct command commands[] = {
    {"tokenize", cmd_tokenize, "encode UTF-8 text from stdin to token ids"},
    {"detokenize", cmd_detokenize, "decode token ids to text"},
    {"template", cmd_template, "render a chat template for messages read from stdin"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: llaisys-cli COMMAND [options]   (llaisys-cli COMMAND --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "llaisys-cli: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
