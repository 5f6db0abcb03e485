/*
 * model_copy.h: the linear weights copied from the model file's mapping into anonymous memory at
 * load, in 2 MiB pages where the kernel grants them. Decode streams every weight once a token;
 * from a file mapping the kernel maps only part of it in huge pages (2.2 of r1-1.5b's 3.1 GB
 * here), and reading the rest costs TLB misses: on an AMD EPYC, bf16 tg64 ran 1.08-1.18x faster
 * from the copy (alternating runs). `--mmap` keeps the weights in the mapping instead.
 */
#ifndef LLAISYS_MODEL_COPY_H
#define LLAISYS_MODEL_COPY_H

#include "errors.h"
#include "model.h"

/* Copy every linear weight of m that its file mapping holds (dense weights, and the planes of a
 * stored quantized model; not a tied lm_head, which is the embedding) into one allocation
 * (m->wmem), in parallel on n_threads; each weight then reads its copy and its pages in the
 * mapping are released (they stay in the page cache; the resident set does not double). Logged
 * with the time it took. Returns LL_OK or LL_ENOMEM (m unchanged). */
enum ll_status model_copy_weights(struct model *m, int n_threads, struct ll_err *err);

#endif
