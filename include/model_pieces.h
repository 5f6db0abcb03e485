/*
 * model_pieces.h: work over every linear weight of a model, cut into pieces of rows and run on
 * a temporary compute pool (quantizing, packing and copying at load: model_quant.c,
 * model_pack.c, model_copy.c).
 */
#ifndef LLAISYS_MODEL_PIECES_H
#define LLAISYS_MODEL_PIECES_H

#include <stdint.h>

#include "errors.h"
#include "model.h"

/* Rows [r0, r1) of linear weight i of m, piece number `piece`. LL_OK, or an error set in err. */
typedef enum ll_status (*model_piece_fn)(void *ctx, struct model_linear *l, int i, int r0, int r1,
                                         int64_t piece, struct ll_err *err);

/* The pieces of piece_rows rows of every linear weight of m, numbered in weight then row order:
 * how many. */
int64_t model_pieces_count(const struct model *m, int piece_rows);

/* fn on every piece, taken from one atomic counter by the threads of a temporary pool of
 * n_threads (< 1: the default, pool.h), so a thread that falls behind (a busy core) holds up
 * nobody. The first piece to fail stops the others from taking more; its error is returned,
 * naming the weight ("DIR: weight 'NAME': ..."). LL_OK, that error, or LL_ENOMEM. */
enum ll_status model_pieces_run(struct model *m, int piece_rows, int n_threads, model_piece_fn fn,
                                void *ctx, struct ll_err *err);

#endif
