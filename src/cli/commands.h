/* commands.h: the llaisys-cli subcommands. Each takes the arguments after its name
 * (argv[0] is the subcommand name), prints its own --help, and returns the process exit code. */
#ifndef LLAISYS_CLI_COMMANDS_H
#define LLAISYS_CLI_COMMANDS_H

int cmd_tokenize(int argc, char **argv);   /* cmd_tokenize.c */
int cmd_detokenize(int argc, char **argv); /* cmd_tokenize.c */
int cmd_bench_tokenizer(int argc, char **argv); /* cmd_bench_tokenizer.c */
int cmd_template(int argc, char **argv);   /* cmd_template.c */
int cmd_mkmodel(int argc, char **argv);    /* cmd_mkmodel.c */
int cmd_bench_matmul(int argc, char **argv); /* cmd_bench_matmul.c */

int cmd_generate(int argc, char **argv);   /* cmd_generate.c */
int cmd_score(int argc, char **argv);      /* cmd_score.c */
int cmd_bench(int argc, char **argv);      /* cmd_bench.c */
int cmd_batch(int argc, char **argv);      /* cmd_batch.c */
int cmd_embed(int argc, char **argv);      /* cmd_embed.c */
int cmd_rerank(int argc, char **argv);     /* cmd_rerank.c */
int cmd_bench_engine(int argc, char **argv); /* cmd_bench_engine.c */
int cmd_bench_serve(int argc, char **argv); /* cmd_bench_serve.c */
int cmd_quantize(int argc, char **argv);   /* cmd_quantize.c */
int cmd_kl(int argc, char **argv);         /* cmd_kl.c */

#endif
