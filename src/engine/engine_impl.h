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
#include "grammar.h"
#include "kv_pool.h"
#include "runtime.h"
#include "sampler.h"
#include "spec.h"
#include "step_cost.h"
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
    int held;                  /* [mbox] submitted and neither finished nor cancelled: the
                                  admission count, at most max_seqs + max_queue (request.c) */
    uint64_t next_id;          /* [mbox] */
    uint64_t rejected;         /* [mbox] submits refused (any reason) */
    bool stop;                 /* [mbox] the scheduler thread should return */
    bool closed;               /* [mbox] the engine is gone: submits are refused */
    struct engine_stats stats; /* [mbox] snapshot at the end of the last step */
};

/* text_split.c: a request's text stream → released answer text, released reasoning text,
 * held-back text and a stop (see engine.h, "Text path"). [sched] once the request runs. */
enum split_state {
    SPLIT_START,     /* nothing released yet: a "<think>" here opens the reasoning */
    SPLIT_REASONING, /* inside <think>: text is reasoning until "</think>" */
    SPLIT_CONTENT,   /* the answer */
};

struct text_split {
    const char *const *stop;    /* (n_stop) stop strings (owned by the request) */
    const size_t *stop_len;
    int n_stop;
    bool reasoning;             /* "<think>" / "</think>" are looked for */
    enum split_state state;
    bool done;                  /* a stop was found: everything after is dropped */
    char *pend;                 /* (n_pend) text not released yet (cap bytes) */
    size_t n_pend, cap;
    char *content, *reason;     /* (cap) what the last feed released, by channel */
    size_t n_content, n_reason;
    int stop_hit;               /* the last feed found stop string stop_hit, else -1 */
    bool closed;                /* the last feed passed "</think>" */
};

/* Buffers for pieces of up to max_piece bytes per feed. Returns LL_OK or LL_ENOMEM. */
enum ll_status text_split_init(struct text_split *t, const char *const *stop,
                               const size_t *stop_len, int n_stop, bool reasoning,
                               enum split_state start, size_t max_piece, struct ll_err *err);
void text_split_free(struct text_split *t);
/* Take the next piece of text (len <= max_piece). check_stops: look for stop strings; final:
 * nothing more comes (release everything held). Results in t->content, t->reason, t->stop_hit,
 * t->closed. Does not allocate. */
void text_split_feed(struct text_split *t, const char *text, size_t len, bool check_stops,
                     bool final);

enum req_state {
    REQ_INBOX,    /* submitted, the scheduler has not taken it yet */
    REQ_WAITING,  /* in the waiting queue (new, or preempted) */
    REQ_RUNNING,  /* in the running list, with KV blocks */
    REQ_FINISHED, /* done; the engine no longer holds it */
};

struct engine_req {
    struct mailbox *mbox;       /* [const] shared with the engine */
    uint64_t id;                /* [const] */
    struct engine_params params; /* [const] prompt, stop_ids and keep_ids point into
                                    this record */
    int32_t stop_ids[ENGINE_MAX_STOP_IDS]; /* [const] */
    int32_t keep_ids[ENGINE_MAX_KEEP_IDS]; /* [const] */
    struct sampler_bias *bias;  /* [const] (params.n_logit_bias) copy, or NULL */
    char *stop_blob;            /* [const] the stop strings, NUL-separated */
    const char *stop[ENGINE_MAX_STOP_STRINGS]; /* [const] into stop_blob */
    size_t stop_len[ENGINE_MAX_STOP_STRINGS];
    uint64_t seed;              /* [const] seed mixed with the choice index */
    struct grammar *grammar;    /* [const] the constraint (a reference), or NULL; wrapped to
                                   start after "</think>" when the output starts inside it */
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
    int batch_rows;             /* rows it has in this step's batch (its drafts included) */
    int batch_draft;            /* of those, draft rows (the last ones) */
    int32_t *draft;             /* (opts.spec_max_draft) this step's draft tokens, when --spec */
    struct spec_state spec;
    struct tokenizer_stream *stream; /* incremental detokenizer */
    bool use_counts;            /* penalties on: counts holds the prompt and output ids */
    struct token_counts counts;
    bool use_split;             /* stop strings or the reasoning split: text goes through split */
    struct text_split split;
    int reasoning_tokens;
    struct grammar_rt *grt;     /* the engine's matcher for grammar (attached at first sample) */
    int gstate;                 /* the grammar state after the tokens so far */
    int cached_tokens, preemptions;
    double t_first_sched, t_first_token;
    double *esum;               /* (hidden_size) params.embed mean: the states summed so far */
    float *embd;                /* (hidden_size) params.embed: the pooled vector; handed to the
                                   poller with the finish (swapped into engine_output) */
    bool embd_ready;            /* embd holds the vector (set before the finish is pushed) */
    int n_embd;                 /* [const] hidden_size for params.embed, else 0 */

    /* [mbox] the outbox and the shared fields */
    int32_t *out_ids;
    int out_n, out_cap;
    struct sampler_logprobs *out_lp; /* (out_n) when params.logprobs */
    int out_lp_cap;
    struct ll_buf out_text, out_reason;
    enum engine_finish finish;  /* set once, when finished */
    bool finish_reported;       /* a poll has returned the finish */
    int32_t stop_id;
    int stop_str;
    struct engine_usage usage;
    struct engine_timings timings;
    char error[256];
    enum engine_req_state pub_state; /* waiting, running or preempted (finished: see finish) */
    bool cancel_requested;      /* on the cancel list, or handled */
    bool held;                  /* counted in mbox->held (until finished or cancelled) */
    double started_at, first_token_at; /* ll_now() of the first start and the first token,
                                  0: not yet (for engine_req_info) */
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
    int32_t think_open, think_close; /* ids of "<think>" / "</think>", -1: none */
    size_t max_piece;           /* most bytes one detokenizer feed or flush returns */
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
    float *logits;              /* (max_logit_rows, vocab) */
    float *hidden;              /* (max_batch_tokens, hidden_size) the step's hidden-state rows
                                   (embeddings) */
    int max_logit_rows;         /* max_seqs, plus the draft rows a step may verify (--spec) */
    int budget;                 /* tokens left in this step */
    bool preempted_now;         /* a preemption happened in this step: admit nothing new */
    int n_decode_rows;          /* this step's rows of decoding sequences, drafts included */
    int n_draft_rows;           /* of those, drafts */
    int n_prompt_rows;          /* this step's prompt rows (chunks, recomputation) */

    /* [sched] latency-aware scheduling (scheduler.c) */
    struct step_cost cost;      /* the measured step cost */
    double step_t0;             /* when this step began */
    int prompt_starved;         /* consecutive steps in which waiting prompt work got less than
                                   the minimum chunk */

    /* pins.c: [sched] written with mbox->lock held too, so other threads may read them */
    struct engine_pin *pins;    /* (n_pins, cap_pins) */
    int n_pins, cap_pins;
    uint64_t pin_clock;         /* [sched] last-use stamps */
    int pin_limit;              /* [mbox] most block references pins may hold */
    uint64_t *unpins;           /* [mbox] (n_unpins, cap_unpins) keys to release next step */
    int n_unpins, cap_unpins;
    /* [sched] constrained decoding (constraint.c) */
    struct token_trie *trie;    /* every token's bytes; built on first use */
    struct constraint_rt *crt;  /* one matcher per distinct grammar */
    int n_crt, cap_crt;

    /* threaded mode */
    pthread_t thread;
    bool threaded;
};

/* One pinned key (engine.h, "Pins"). */
struct engine_pin {
    uint64_t key;
    int32_t *blocks; /* (n) one reference each */
    int n;
    uint64_t used;   /* pin_clock at the last pin */
};

/* pins.c [sched]: pin r's computed full blocks under its pin_key (before its blocks are
 * dropped); release keys asked by engine_unpin; release least recently used pins until `want`
 * blocks are allocatable or no pin is left (returns whether any was released); free all. */
void pins_on_finish(struct engine *e, struct engine_req *r);
void pins_take_unpins(struct engine *e);
bool pins_make_room(struct engine *e, int want);
void pins_free(struct engine *e);

/* request.c: the request record and the mailbox. */
struct mailbox *mailbox_create(void);
void mailbox_unref(struct mailbox *mb);               /* takes the lock itself */
/* Drop one reference to r with mbox->lock held. Returns true when it was the last: the caller
 * then calls req_free(r) and mailbox_unref() after unlocking. */
bool req_unref_locked(struct engine_req *r);
/* What one push adds to an outbox. */
struct req_push {
    int32_t id;                        /* a new token, or -1 for none */
    const struct sampler_logprobs *lp; /* its logprobs (params.logprobs), else NULL */
    const char *text, *reasoning;      /* (len, reasoning_len) new text of each channel */
    size_t len, reasoning_len;
    const struct engine_usage *usage;  /* NULL: unchanged */
    const struct engine_timings *timings;
    enum engine_finish finish;         /* != ENGINE_RUNNING: record the finish */
    int32_t stop_id;                   /* with the finish */
    int stop_str;
    const char *msg;                   /* for errors */
};
/* Append a push to the outbox, update usage and timings, and record the finish; signals
 * pollers. Takes the lock. Returns false, appending nothing, when the outbox could not grow
 * (out of memory); a push without id and text cannot fail. */
bool req_push_output(struct engine_req *r, const struct req_push *p);
void req_free(struct engine_req *r);                  /* frees the record (no lock needed) */
/* Drop the engine's (or the cancel list's) reference to a request (takes the lock; may free
 * it). */
void req_engine_unref(struct engine_req *r);

/* constraint.c: the grammar in the sampling path (scheduler thread). Mask row for r's state
 * (attaching r to a matcher on first use); false with msg on failure (out of memory, too many
 * states, nothing allowed). */
bool constraint_mask(struct engine *e, struct engine_req *r, float *row, char *msg, size_t cap);
/* Advance r's state by the sampled id: 0 go on, 1 the grammar is complete, -1 failure (msg). */
int constraint_take(struct engine *e, struct engine_req *r, int32_t id, char *msg, size_t cap);
/* Detach r from its matcher (at finish); free every matcher and the trie (at destroy). */
void constraint_release(struct engine *e, struct engine_req *r);
void constraint_free_all(struct engine *e);

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
/* After verifying drafts: release r's blocks past the one that holds position n_computed
 * (they held only rejected draft tokens). */
void sched_trim_blocks(struct engine *e, struct engine_req *r);
/* After the step: feed its duration to the cost estimate. */
void sched_step_done(struct engine *e, double seconds);
/* Release r's KV blocks and take it out of the running list (r->state is left to the caller). */
void sched_drop_blocks(struct engine *e, struct engine_req *r);

#endif
