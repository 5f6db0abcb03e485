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
    {"bench-tokenizer", cmd_bench_tokenizer, "time tokenizer loading and encoding"},
    {"template", cmd_template, "render a chat template for messages read from stdin"},
    {"generate", cmd_generate, "generate text from a prompt, a chat message or token ids"},
    {"score", cmd_score, "print the top next-token logits at every prompt position (JSON lines)"},
    {"bench", cmd_bench, "measure load time, memory, prompt and decode tokens/s"},
    {"mkmodel", cmd_mkmodel, "write a random Qwen2 model directory (Hugging Face layout)"},
    {"quantize", cmd_quantize, "write a copy of a model with 8- or 4-bit linear weights"},
    {"kl", cmd_kl, "KL divergence and top-1 agreement of a quantized model against the original"},
    {"bench-matmul", cmd_bench_matmul, "time the matmul kernels on the R1-1.5B shapes"},
    {"batch", cmd_batch, "run the requests of a JSONL file through the engine at once"},
    {"embed", cmd_embed, "print the embeddings of a file's lines (JSON lines)"},
    {"rerank", cmd_rerank, "rank a file's lines by their relevance to a query (JSON lines)"},
    {"bench-engine", cmd_bench_engine, "measure the engine: concurrent streams, TTFT, prefix cache"},
    {"bench-serve", cmd_bench_serve, "closed- or open-loop streaming load against a server"},
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
