/*
 * api_example.c: libllaisys from an application, both levels of include/llaisys.h.
 *
 *   cc -std=c99 api_example.c $(pkg-config --cflags --libs llaisys) -o api_example
 *   ./api_example MODEL_DIR "prompt"     (a plain prompt: it is put into JSON as it is)
 *
 * 1. The model: decode the prompt in sequence 0, copy its cache to sequence 1 (shared
 *    blocks), then continue both greedily in one batch per step: they stay identical.
 * 2. The engine: the same prompt as an OpenAI completions body, stepped and polled here.
 * Both print the generated ids; greedy decoding makes them equal (tests/cli_api.sh checks it).
 */
#include <llaisys.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_NEW 8

static int fail(const char *what)
{
    fprintf(stderr, "api_example: %s: %s\n", what, llaisys_last_error());
    return 1;
}

static int32_t argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

static int model_level(const char *dir, const char *prompt)
{
    struct llaisys_model_params p = llaisys_model_default_params();
    p.n_ctx = 256;
    p.n_seq_max = 2;
    llaisys_model *m;
    if (llaisys_model_create(dir, &p, &m))
        return fail("llaisys_model_create");
    int32_t ids[256];
    int32_t n = llaisys_model_tokenize(m, prompt, strlen(prompt), true, ids, 256);
    if (n < 1 || n > 256 - N_NEW) {
        llaisys_model_destroy(m);
        return fail("llaisys_model_tokenize");
    }
    struct llaisys_batch one = llaisys_batch_get_one(ids, n);
    if (llaisys_decode(m, &one) || llaisys_kv_seq_cp(m, 0, 1, -1, -1)) {
        llaisys_model_destroy(m);
        return fail("prompt");
    }
    int32_t next = argmax(llaisys_get_logits_ith(m, -1), llaisys_model_n_vocab(m));
    struct llaisys_batch b = llaisys_batch_init(2);
    printf("model ids:");
    for (int k = 0; k < N_NEW; k++) {
        printf(" %d", next);
        for (int s = 0; s < 2; s++) { /* the same token in both sequences */
            b.token[s] = next;
            b.seq_id[s] = s;
            b.logits[s] = 1;
        }
        b.n_tokens = 2;
        int32_t rc = llaisys_decode(m, &b);
        if (rc) {
            llaisys_batch_free(b);
            llaisys_model_destroy(m);
            return fail(rc == LLAISYS_NO_KV_ROOM ? "no KV room" : "llaisys_decode");
        }
        int32_t a = argmax(llaisys_get_logits_ith(m, 0), llaisys_model_n_vocab(m));
        int32_t c = argmax(llaisys_get_logits_ith(m, 1), llaisys_model_n_vocab(m));
        if (a != c) {
            fprintf(stderr, "api_example: the two sequences diverged (%d, %d)\n", a, c);
            return 1;
        }
        next = a;
    }
    struct llaisys_kv_stats st;
    llaisys_kv_stats(m, &st);
    printf("\nkv: %lld of %lld tokens used, 2 sequences of %lld positions\n",
           (long long)st.used, (long long)st.capacity, (long long)st.seq_tokens / 2);
    llaisys_batch_free(b);
    llaisys_model_destroy(m);
    return 0;
}

static int engine_level(const char *dir, const char *prompt)
{
    llaisys_engine *e;
    if (llaisys_engine_create(dir, "threads=2 ctx=256", &e))
        return fail("llaisys_engine_create");
    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": %d, \"temperature\": 0, "
             "\"ignore_eos\": true}", prompt, N_NEW);
    llaisys_request *r;
    if (llaisys_engine_submit(e, body, &r)) {
        llaisys_engine_destroy(e);
        return fail("llaisys_engine_submit");
    }
    printf("engine ids:");
    struct llaisys_event ev;
    do {
        if (llaisys_engine_step(e, NULL))
            fail("llaisys_engine_step");
        if (llaisys_request_poll(r, 0, &ev) == 1)
            for (int i = 0; i < ev.n_ids; i++)
                printf(" %d", ev.ids[i]);
    } while (!ev.finish);
    printf("\nfinish: %s, %d prompt + %d generated tokens\n", llaisys_finish_str(ev.finish),
           ev.usage.prompt_tokens, ev.usage.completion_tokens);
    llaisys_request_release(r);
    llaisys_engine_destroy(e);
    return 0;
}

int main(int argc, char **argv)
{
    if (llaisys_api_version() != LLAISYS_API_VERSION) {
        fprintf(stderr, "api_example: built for API %d, the library is %d\n",
                LLAISYS_API_VERSION, llaisys_api_version());
        return 1;
    }
    const char *dir = argc > 1 ? argv[1] : "tests/fixtures/tiny-qwen2";
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time";
    return model_level(dir, prompt) || engine_level(dir, prompt);
}
