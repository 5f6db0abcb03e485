/*
 * engine_impl.h: the engine's internal structures, shared by request.c (request records,
 * outboxes, the mailbox), scheduler.c (batch building, admission, preemption) and engine.c
 * (the public API and the step).
 *
 * Ownership: fields marked [sched] belong to the scheduler thread alone; fields marked [mbox]
 * are read and written only with mbox->lock held; [const] fields are set in engine_submit
 * before the request is published and never change.
 * Lock order: there is one lock (struct mailbox); nothing else is locked.
 */
#ifndef LLAISYS_ENGINE_IMPL_H
#define LLAISYS_ENGINE_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "kv_pool.h"
#include "runtime.h"
#include "sampler.h"
#include "tokenizer.h"

/* The one lock between the scheduler and every other thread: the inbox, the cancel list, every
 * outbox. Reference-counted (the engine and each live request), so request handles outlive
 * engine_destroy safely. */
struct mailbox {
    pthread_mutex_t lock;
    pthread_cond_t wake;       /* the scheduler thread sleeps here while idle */
    int refs;                  /* [mbox] engine + requests not yet freed */
    struct engine_req *inbox_head, *inbox_tail; /* [mbox] submitted, not yet seen */
    struct engine_req *cancels; /* [mbox] cancel requests, linked through cancel_next */
    int queued;                /* [mbox] submitted and never started nor finished */
    uint64_t next_id;          /* [mbox] */
    uint64_t rejected;         /* [mbox] submits refused (any reason) */
    bool stop;                 /* [mbox] the scheduler thread should return */
    bool closed;               /* [mbox] the engine is gone: submits are refused */
    struct engine_stats stats; /* [mbox] snapshot at the end of the last step */
};

enum req_state {
    REQ_INBOX,    /* submitted, the scheduler has not taken it yet */
    REQ_WAITING,  /* in the waiting queue (new, or preempted) */
    REQ_RUNNING,  /* in the running list, with KV blocks */
    REQ_FINISHED, /* done; the engine no longer holds it */
};

struct engine_req {
    struct mailbox *mbox;       /* [const] shared with the engine */
    uint64_t id;                /* [const] */
    struct engine_params params; /* [const] prompt and stop_ids point into this record */
    int32_t stop_ids[ENGINE_MAX_STOP_IDS]; /* [const] */
    uint64_t seed;              /* [const] seed mixed with the choice index */
    int n_prompt;               /* [const] */
    int max_len;                /* [const] prompt + at most max_tokens */
    double t_submit;            /* [const] */

    /* [sched] the sequence */
    enum req_state state;
    int32_t *tokens;            /* (max_len) prompt, then generated tokens */
    int n_tokens;               /* tokens known (prompt + generated) */
    int n_computed;             /* tokens whose K/V are in the cache (< n_tokens while running) */
    int32_t *blocks;            /* (max_blocks) block table */
    int n_blocks, max_blocks;
    uint64_t *hashes;           /* (max_blocks) chained hash of full blocks 0..n_hashes-1 */
    int n_hashes;
    int n_published;            /* blocks of the table that are in the prefix cache */
    uint64_t stamp;             /* first start order (0: never started); kept when preempted */
    struct engine_req *prev, *next; /* links in the waiting or running list */
    uint64_t batch_step;        /* step in which it last got rows */
    int batch_seq;              /* its index in this step's batch sequences */
    int batch_rows;             /* rows it has in this step's batch */
    struct tokenizer_stream *stream; /* incremental detokenizer */
    int cached_tokens, preemptions;
    double t_first_sched, t_first_token;

    /* [mbox] the outbox and the shared fields */
    int32_t *out_ids;
    int out_n, out_cap;
    char *out_text;
    size_t out_len, out_tcap;
    enum engine_finish finish;  /* set once, when finished */
    bool finish_reported;       /* a poll has returned the finish */
    int32_t stop_id;
    struct engine_usage usage;
    struct engine_timings timings;
    char error[256];
    bool cancel_requested;      /* on the cancel list, or handled */
    struct engine_req *cancel_next, *inbox_next;
    pthread_cond_t cond;        /* signalled when the outbox changes */
    int refs;                   /* caller + engine (until finished) + cancel list (while on it) */
    bool caller_released;
};

/* Doubly linked list of requests (waiting queue or running list). */
struct req_list {
    struct engine_req *head, *tail;
    int n;
};

struct engine {
    struct model *model;
    struct tokenizer *tok;
    struct model_runtime *rt;
    struct sampler smp;
    struct engine_opts opts;    /* resolved */
    int vocab;
    int32_t eos[2 * LL_MAX_EOS];
    int n_eos;
    struct mailbox *mbox;

    /* [sched] */
    struct kv_pool pool;
    struct req_list waiting;    /* preempted ones first (by stamp), then new ones by arrival */
    struct req_list running;    /* ascending stamp: the tail is the most recently started */
    uint64_t next_stamp;
    uint64_t step_no;
    struct engine_stats counters; /* running totals (the stats snapshot's source) */

    /* [sched] the step's batch, sized at create */
    int n_rows, n_seqs;
    int32_t *b_token, *b_pos, *b_seq; /* (max_batch_tokens) */
    uint8_t *b_want;            /* (max_batch_tokens) */
    struct ll_kv_seq *b_seqs;   /* (max_seqs) */
    struct engine_req **b_reqs; /* (max_seqs) request of each batch sequence */
    float *logits;              /* (max_seqs, vocab) */
    int budget;                 /* tokens left in this step */
    bool preempted_now;         /* a preemption happened in this step: admit nothing new */

    /* threaded mode */
    pthread_t thread;
    bool threaded;
};

/* request.c: the request record and the mailbox. */
struct mailbox *mailbox_create(void);
void mailbox_unref(struct mailbox *mb);               /* takes the lock itself */
/* Drop one reference to r with mbox->lock held. Returns true when it was the last: the caller
 * then calls req_free(r) and mailbox_unref() after unlocking. */
bool req_unref_locked(struct engine_req *r);
/* Append one token (id >= 0, or -1 for none) and text to the outbox, update usage and
 * timings, and when finish != ENGINE_RUNNING record the finish (with stop_id and, for errors,
 * msg); signals pollers. Takes the lock. Returns false, appending nothing, when the outbox could
 * not grow (out of memory); a push without id and text cannot fail. */
bool req_push_output(struct engine_req *r, int32_t id, const char *text, size_t len,
                     const struct engine_usage *usage, const struct engine_timings *timings,
                     enum engine_finish finish, int32_t stop_id, const char *msg);
void req_free(struct engine_req *r);                  /* frees the record (no lock needed) */
/* Drop the engine's (or the cancel list's) reference to a request (takes the lock; may free
 * it). */
void req_engine_unref(struct engine_req *r);

/* scheduler.c: building one step's batch. */
void sched_list_remove(struct req_list *l, struct engine_req *r);
void sched_list_push_back(struct req_list *l, struct engine_req *r);
/* Insert into the waiting queue: a preempted request goes before every new one, ordered by
 * stamp; a new one goes last. */
void sched_waiting_insert(struct engine *e, struct engine_req *r);
/* Build this step's batch in e->b_* (decode tokens first, then prompt chunks, then new
 * admissions), preempting as needed. */
void sched_build_batch(struct engine *e);
/* After the forward pass: publish the newly completed full blocks of r in the prefix cache. */
void sched_publish_blocks(struct engine *e, struct engine_req *r);
/* Release r's KV blocks and take it out of the running list (r->state is left to the caller). */
void sched_drop_blocks(struct engine *e, struct engine_req *r);

#endif
