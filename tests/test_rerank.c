/*
 * test_rerank.c: reranking (reranker.h) on random tiny Qwen3 models with the real Qwen3
 * tokenizer and chat template. A directory whose README.md names Qwen3-Reranker judges by the
 * next-token logits of "no" and "yes"; its prompt is, token for token, the one Qwen3-Reranker's
 * model card builds (its prefix, "<Instruct>: ...\n<Query>: ...\n<Document>: ..." and its
 * suffix, each tokenized on its own); its score is sigmoid(logit(yes) - logit(no)) of the
 * float64 reference's logits at the prompt's last position (the engine's exact path within
 * 1e-5, the bf16 path within 2e-2), and the same through a quantized lm_head's rows. A
 * sequence-classification checkpoint (score.weight of 1 or 2 labels, untied and without
 * lm_head) scores sigmoid(w . h) / sigmoid((w1 - w0) . h) of the reference's last hidden
 * state, and refuses generation; --rerank-tokens picks any tokens (one: sigmoid of its logit);
 * what cannot rank (no head, three labels, a score.weight of another width, a token that is
 * not one token, three tokens, no chat template) is refused naming why.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_template.h"
#include "engine.h"
#include "engine_harness.h"
#include "mkmodel.h"
#include "model.h"
#include "model_tmp.h"
#include "ref_forward.h"
#include "reranker.h"
#include "safetensors.h"
#include "tokenizer.h"
#include "util.h"

/* Qwen3-Reranker's model card: the text around each formatted pair. */
static const char card_prefix[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."
    "<|im_end|>\n<|im_start|>user\n";
static const char card_suffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

static const char *const queries[] = {"What is the capital of China?", "Explain gravity"};
static const char *const docs[] = {
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other. It gives weight to "
    "physical objects and is responsible for the movement of planets around the sun.",
    "  spaces, émigré — and a tab\there."};

static char base[64], dir[128];

static void put(const char *d, const char *name, const char *text)
{
    char *path = ll_path_join(d, name);
    struct ll_err err = {0};
    assert_int_equal(ll_write_file(path, text, strlen(text), &err), LL_OK);
    free(path);
}

static int setup(void **state)
{
    (void)state;
    struct mkmodel_spec sp;
    struct ll_err err = {0};
    if (mkmodel_preset(&sp, "tiny", &err) != LL_OK)
        return -1;
    sp.family = MKMODEL_QWEN3;
    sp.seed = 29;
    sp.bos_token_id = -1, sp.eos_token_id = 151645;
    if (model_tmp_make_tok(base, sizeof base, "rerank", &sp, "models/qwen3-tokenizer"))
        return -1;
    snprintf(dir, sizeof dir, "%s/m", base);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return model_tmp_remove(base);
}

/* The tokenizer and chat template of d; reranker_choose's status and message. */
static enum ll_status choose(struct reranker *rk, const struct model *m, const char *d,
                             const char *tokens, char *msg)
{
    struct ll_err err = {0};
    struct tokenizer *tok;
    struct chat_template *t;
    char *bos = NULL, *eos = NULL;
    assert_int_equal(tokenizer_load(&tok, d, &err), LL_OK);
    assert_int_equal(chat_template_load_model(&t, &bos, &eos, d, &err), LL_OK);
    enum ll_status s = reranker_choose(rk, m, tok, t, bos, eos, tokens, &err);
    if (msg)
        memcpy(msg, err.msg, sizeof err.msg);
    chat_template_free(t);
    free(bos), free(eos);
    tokenizer_free(tok);
    return s;
}

static void encode(const struct tokenizer *tok, const char *text, int32_t **ids, size_t *n)
{
    struct ll_err err = {0};
    assert_int_equal(tokenizer_encode(tok, text, strlen(text), false, ids, n, &err), LL_OK);
}

/* The engine's last hidden state of ids (an embedding request, last position). */
static void engine_last_state(struct engine *e, const int32_t *ids, int n, float *h, int H)
{
    struct engine_params p = {.prompt = ids, .n_prompt = n, .embed = LL_POOL_LAST};
    struct engine_req *r = submit(e, &p);
    run_idle(e);
    struct engine_output o = {0};
    assert_true(engine_poll(r, &o));
    assert_int_equal(o.finish, ENGINE_FINISH_STOP);
    assert_int_equal(o.n_embedding, H);
    memcpy(h, o.embedding, sizeof(float) * H);
    engine_output_free(&o);
    engine_req_release(r);
}

static struct model *open_at(const char *d, const struct model_open_opts *o)
{
    struct ll_err err = {0};
    struct model *m = NULL;
    if (model_open(&m, d, o, &err) != LL_OK)
        fail_msg("%s", err.msg);
    return m;
}

static double sigmoid(double z)
{
    return 1.0 / (1.0 + exp(-z));
}

/* The log-odds a score came from (compared rather than the score: a sigmoid near 0 or 1 would
 * hide a wrong logit). */
static double log_odds(double s)
{
    return log(s / (1 - s));
}

/* ---- Qwen3-Reranker as published: a causal LM judged by "no" and "yes" ---- */

static void test_qwen3_reranker(void **state)
{
    (void)state;
    struct ll_err err = {0};
    char msg[512];
    struct reranker rk;
    struct model *m = open_at(dir, NULL);
    /* a plain Qwen3 directory does not rank */
    assert_int_equal(choose(&rk, m, dir, NULL, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "no relevance head"));
    assert_non_null(strstr(msg, "--rerank-tokens"));
    assert_int_equal(rk.n_rows, 0);
    put(dir, "README.md", "---\nlicense: apache-2.0\n---\n\n# Qwen3-Reranker-0.6B\n\nText.\n");
    model_close(m);
    m = open_at(dir, NULL);
    assert_int_equal(choose(&rk, m, dir, NULL, msg), LL_OK);
    assert_int_equal(rk.n_rows, 2);
    assert_non_null(strstr(rk.source, "no,yes"));
    assert_non_null(strstr(rk.source, "Qwen3-Reranker"));

    struct tokenizer *tok;
    assert_int_equal(tokenizer_load(&tok, dir, &err), LL_OK);
    const int32_t yes = tokenizer_token_to_id(tok, "yes"), no = tokenizer_token_to_id(tok, "no");
    assert_true(yes >= 0 && no >= 0);
    const int H = m->config.hidden_size, V = m->config.vocab_size;
    struct engine *ex = make_engine_on(dir, (struct engine_opts){.n_ctx = 256, .exact = true});
    struct engine *fa = make_engine_on(dir, (struct engine_opts){.n_ctx = 256});
    struct ref ref;
    ref_open(&ref, dir, &m->config, (struct ref_kind){.qk_norm = true});
    float *h = malloc(sizeof(float) * H);
    double worst[2] = {0, 0};
    for (int q = 0; q < 2; q++)
        for (int d = 0; d < 3; d++) {
            /* the card's tokens: prefix, the formatted pair, suffix, each encoded alone */
            char body[512];
            snprintf(body, sizeof body, "<Instruct>: %s\n<Query>: %s\n<Document>: %s",
                     q ? "Find physics explanations" : RERANK_DEFAULT_INSTRUCTION, queries[q],
                     docs[d]);
            int32_t *a, *b, *c, *got;
            size_t na, nb, nc;
            int n;
            encode(tok, card_prefix, &a, &na);
            encode(tok, body, &b, &nb);
            encode(tok, card_suffix, &c, &nc);
            assert_int_equal(reranker_prompt(&rk, tok, q ? "Find physics explanations" : NULL,
                                             queries[q], strlen(queries[q]), docs[d],
                                             strlen(docs[d]), &got, &n, &err),
                             LL_OK);
            assert_int_equal(n, (int)(na + nb + nc));
            assert_memory_equal(got, a, sizeof(int32_t) * na);
            assert_memory_equal(got + na, b, sizeof(int32_t) * nb);
            assert_memory_equal(got + na + nb, c, sizeof(int32_t) * nc);
            /* the reference's logits at the last position */
            double *lg = malloc(sizeof(double) * (size_t)n * V);
            ref_forward(&ref, got, n, lg);
            const double *last = lg + (size_t)(n - 1) * V;
            double want = last[yes] - last[no];
            for (int k = 0; k < 2; k++) {
                engine_last_state(k ? fa : ex, got, n, h, H);
                double s = reranker_score(&rk, h), diff = fabs(log_odds(s) - want);
                worst[k] = diff > worst[k] ? diff : worst[k];
            }
            free(lg), free(a), free(b), free(c), free(got);
        }
    printf("Qwen3-Reranker log-odds against the reference's logit(yes) - logit(no): exact path "
           "%.2e, bf16 path %.2e\n", worst[0], worst[1]);
    assert_true(worst[0] < 1e-5);
    assert_true(worst[1] < 2e-2);
    ref_close(&ref);

    /* A request's documents share the instruction-and-query prefix: only its blocks are
     * published (cache_prefix), and every document after the first takes them from the cache;
     * the scores are those computed without the cache. */
    {
        int32_t *ids[3];
        int n[3];
        for (int d = 0; d < 3; d++)
            assert_int_equal(reranker_prompt(&rk, tok, NULL, queries[0], strlen(queries[0]),
                                             docs[d], strlen(docs[d]), &ids[d], &n[d], &err),
                             LL_OK);
        int shared = reranker_shared_prefix(&rk, tok, NULL, queries[0], strlen(queries[0]), ids,
                                            n, 3);
        int32_t *alone;
        int na;
        assert_int_equal(reranker_prompt(&rk, tok, NULL, queries[0], strlen(queries[0]), "", 0,
                                         &alone, &na, &err),
                         LL_OK);
        assert_true(shared > rk.n_head && shared <= na - rk.n_tail);
        /* the documents part right after it */
        assert_true(ids[0][shared] != ids[1][shared] || ids[0][shared] != ids[2][shared]);
        struct engine *pc = make_engine_on(dir, (struct engine_opts){.n_ctx = 256});
        const int bs = engine_get_opts(pc)->block_size;
        struct engine_req *r[3];
        for (int d = 0; d < 3; d++)
            r[d] = submit(pc, &(struct engine_params){.prompt = ids[d], .n_prompt = n[d],
                                                      .embed = LL_POOL_LAST,
                                                      .cache_prefix = shared});
        run_idle(pc);
        struct engine_stats st;
        engine_get_stats(pc, &st);
        printf("3 documents, %d shared tokens: %d blocks cached, %llu tokens from the cache\n",
               shared, st.kv_cached, (unsigned long long)st.cached_tokens);
        assert_int_equal(st.kv_cached, shared / bs);
        assert_int_equal(st.cached_tokens, 2 * (shared / bs) * bs);
        for (int d = 0; d < 3; d++) {
            struct engine_output o = {0};
            assert_true(engine_poll(r[d], &o));
            float *want = malloc(sizeof(float) * H);
            engine_last_state(fa, ids[d], n[d], want, H);
            assert_memory_equal(o.embedding, want, sizeof(float) * H);
            free(want);
            engine_output_free(&o);
            engine_req_release(r[d]);
            free(ids[d]);
        }
        free(alone);
        engine_destroy(pc);
    }

    /* one token: sigmoid of its logit; the words as the tokenizer spells them */
    struct reranker one;
    assert_int_equal(choose(&one, m, dir, "yes", msg), LL_OK);
    assert_int_equal(one.n_rows, 1);
    assert_memory_equal(one.w, rk.w + H, sizeof(float) * H);
    for (int i = 0; i < H; i++)
        h[i] = (float)((i % 7) - 3) / 8.0f;
    double zy = 0, zn = 0;
    for (int i = 0; i < H; i++)
        zy += (double)rk.w[H + i] * h[i], zn += (double)rk.w[i] * h[i];
    assert_true(fabs(reranker_score(&one, h) - sigmoid(zy)) < 1e-12);
    assert_true(fabs(reranker_score(&rk, h) - sigmoid(zy - zn)) < 1e-12);
    reranker_free(&one);

    /* refused, naming why */
    assert_int_equal(choose(&one, m, dir, "no,yes,maybe", msg), LL_EINVAL);
    assert_non_null(strstr(msg, "one or two tokens"));
    assert_int_equal(choose(&one, m, dir, "no,Not a single token", msg), LL_EINVAL);
    assert_non_null(strstr(msg, "\"Not a single token\" is"));
    assert_non_null(strstr(msg, "not one"));
    assert_int_equal(reranker_choose(&one, m, tok, NULL, NULL, NULL, "no,yes", &err),
                     LL_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "no chat template"));
    assert_null(one.w);

    /* a quantized lm_head: its rows dequantized, the same as the quantized logits would be */
    struct model *q8 = open_at(dir, &(struct model_open_opts){.quantize = true,
                                                                       .qscheme = MODEL_QS_Q8_0});
    struct reranker rq;
    assert_int_equal(choose(&rq, q8, dir, NULL, msg), LL_OK);
    double dq = 0;
    for (int i = 0; i < 2 * H; i++)
        dq = fmax(dq, fabs(rq.w[i] - rk.w[i]));
    printf("q8_0 lm_head rows: within %.2e of the bf16 rows\n", dq);
    assert_true(dq > 0 && dq < 0.02);
    reranker_free(&rq);
    model_close(q8);

    free(h);
    engine_destroy(ex);
    engine_destroy(fa);
    reranker_free(&rk);
    tokenizer_free(tok);
    model_close(m);
    char readme[160];
    snprintf(readme, sizeof readme, "%s/README.md", dir);
    assert_int_equal(unlink(readme), 0);
}

/* ---- a sequence-classification checkpoint ---- */

/* dst: dir's model.safetensors plus score.weight (labels, width) of bf16 values from seed;
 * config.json with architectures Qwen3ForSequenceClassification and tie_word_embeddings
 * false (the tiny model is tied: no lm_head tensor). */
static void write_seqcls(const char *dst, int labels, int width, uint64_t seed)
{
    struct ll_err err = {0};
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct safetensors *st;
    assert_int_equal(st_open(&st, path, &err), LL_OK);
    size_t n = st_count(st);
    struct st_write_tensor *t = calloc(n + 1, sizeof *t);
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *x = st_at(st, i);
        t[i] = (struct st_write_tensor){.name = x->name, .dtype = x->dtype, .ndim = x->ndim,
                                        .data = x->data};
        memcpy(t[i].shape, x->shape, sizeof x->shape);
    }
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)labels * width);
    for (int i = 0; i < labels * width; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        w[i] = ll_f32_to_bf16((float)((double)(seed >> 11) / 9007199254740992.0 - 0.5) / 4);
    }
    t[n] = (struct st_write_tensor){.name = "score.weight", .dtype = ST_BF16, .ndim = 2,
                                    .shape = {labels, width}, .data = w};
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    assert_int_equal(st_write(path, t, n + 1, &err), LL_OK);
    st_close(st);
    free(t);
    free(w);
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json",
                                        "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char src[256], *text = NULL;
        size_t len = 0;
        snprintf(src, sizeof src, "%s/%s", dir, files[i]);
        assert_int_equal(ll_read_file(src, &text, &len, &err), LL_OK);
        snprintf(path, sizeof path, "%s/%s", dst, files[i]);
        assert_int_equal(ll_write_file(path, text, len, &err), LL_OK);
        free(text);
    }
    char *cfg = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(ll_read_file(path, &cfg, &len, &err), LL_OK);
    char *a = strstr(cfg, "\"Qwen3ForCausalLM\"");
    char *tie = strstr(cfg, "\"tie_word_embeddings\": true");
    assert_non_null(a);
    assert_non_null(tie);
    char *out = malloc(len + 64);
    int k = snprintf(out, len + 64, "%.*s\"Qwen3ForSequenceClassification\"%.*s"
                     "\"tie_word_embeddings\": false%s",
                     (int)(a - cfg), cfg, (int)(tie - a - 18), a + 18,
                     tie + strlen("\"tie_word_embeddings\": true"));
    snprintf(path, sizeof path, "%s/config.json", dst);
    assert_int_equal(ll_write_file(path, out, (size_t)k, &err), LL_OK);
    free(out);
    free(cfg);
}

static void test_sequence_classification(void **state)
{
    (void)state;
    struct ll_err err = {0};
    char msg[512], d[] = "/tmp/llaisys-seqcls-XXXXXX";
    assert_non_null(mkdtemp(d));
    struct model *base_m = open_at(dir, NULL);
    const int H = base_m->config.hidden_size;
    int32_t *ids;
    int n;
    for (int labels = 1; labels <= 2; labels++) {
        write_seqcls(d, labels, H, 77 + labels);
        struct model *m = open_at(d, NULL);
        assert_true(m->no_lm_head);
        struct reranker rk;
        assert_int_equal(choose(&rk, m, d, NULL, msg), LL_OK);
        assert_int_equal(rk.n_rows, labels);
        assert_non_null(strstr(rk.source, "score.weight"));
        struct tokenizer *tok;
        assert_int_equal(tokenizer_load(&tok, d, &err), LL_OK);
        assert_int_equal(reranker_prompt(&rk, tok, NULL, queries[1], strlen(queries[1]), docs[1],
                                         strlen(docs[1]), &ids, &n, &err),
                         LL_OK);
        /* the reference: its last final hidden state under the stored rows */
        double *hs = malloc(sizeof(double) * (size_t)n * H);
        struct ref ref;
        ref_open(&ref, d, &m->config, (struct ref_kind){.qk_norm = true});
        ref_forward_states(&ref, ids, n, NULL, hs);
        ref_close(&ref);
        const struct st_tensor *sw = st_find(m->st, "score.weight");
        double z[2] = {0, 0};
        for (int l = 0; l < labels; l++)
            for (int i = 0; i < H; i++)
                z[l] += ll_bf16_to_f32(((const uint16_t *)sw->data)[(size_t)l * H + i]) *
                        hs[(size_t)(n - 1) * H + i];
        double want = labels == 1 ? z[0] : z[1] - z[0];
        struct engine *e = make_engine_on(d, (struct engine_opts){.n_ctx = 256, .exact = true});
        float *h = malloc(sizeof(float) * H);
        engine_last_state(e, ids, n, h, H);
        double got = log_odds(reranker_score(&rk, h));
        printf("%d-label score.weight: log-odds %.9f against the reference's %.9f\n", labels,
               got, want);
        assert_true(fabs(got - want) < 1e-5);
        /* no lm_head: generation is refused, naming why */
        struct engine_req *r = NULL;
        struct engine_params p = {.prompt = ids, .n_prompt = n, .max_tokens = 2};
        assert_int_equal(engine_submit(e, &p, &r, &err), LL_EUNSUPPORTED);
        assert_non_null(strstr(err.msg, "ranking model"));
        engine_destroy(e);
        free(h), free(hs), free(ids);
        tokenizer_free(tok);
        reranker_free(&rk);
        model_close(m);
    }
    /* three labels, or another width: refused naming the tensor */
    write_seqcls(d, 3, H, 5);
    struct model *m = open_at(d, NULL);
    struct reranker rk;
    assert_int_equal(choose(&rk, m, d, NULL, msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "'score.weight' has 3 labels"));
    model_close(m);
    write_seqcls(d, 1, H / 2, 5);
    m = open_at(d, NULL);
    assert_int_equal(choose(&rk, m, d, NULL, msg), LL_EMODEL);
    assert_non_null(strstr(msg, "'score.weight' must have shape (labels, 64)"));
    model_close(m);
    /* without lm_head, --rerank-tokens (which wins over score.weight) has nothing to judge
     * with */
    write_seqcls(d, 1, H, 5);
    m = open_at(d, NULL);
    assert_int_equal(choose(&rk, m, d, "no,yes", msg), LL_EUNSUPPORTED);
    assert_non_null(strstr(msg, "--rerank-tokens: this model has no lm_head to judge with"));
    model_close(m);
    model_close(base_m);
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json",
                                        "tokenizer_config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        assert_int_equal(unlink(p), 0);
    }
    assert_int_equal(rmdir(d), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_reranker),
        cmocka_unit_test(test_sequence_classification),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
