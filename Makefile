# llaisys Makefile: objects under $(BUILD)/, programs at the top level.
#
#   make            build the programs and the default model
#   make test       set up, build, run every test (plain, then under ASan+UBSan)
#   make run        set up, build, serve the default model at http://127.0.0.1:8000
#   make bench      run the benchmarks (see README)
#   make bench-spec speculative decoding on and off, one stream (see README)
#   make SANITIZE=address|undefined|address,undefined ...   sanitizer build (in its own $(BUILD))

CC       ?= gcc
SANITIZE ?=
BUILD    ?= build$(if $(SANITIZE),/san-$(subst $(comma),-,$(SANITIZE)))
comma    := ,
TP       := build/third_party

# Base flags target plain x86-64 (with SSE4.2/AVX2-free code); SIMD kernels live in files named
# *_avx2.c / *_avx512.c that get their own flags and are chosen at run time by CPU features.
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -MMD -MP \
            -Iinclude -I$(TP)/cjson/include -I$(TP)/microhttpd/include
# Built from Debian source packages by third_party/ (Debian ships no usable static archive).
TP_LIBS  := $(TP)/microhttpd/lib/libmicrohttpd.a $(TP)/cjson/libcjson.a
LDLIBS   := $(TP_LIBS) -lutf8proc -lopenblas -lm -pthread
STATIC_LDLIBS := $(TP_LIBS) -lutf8proc -lopenblas -lgfortran -lquadmath -lm -pthread
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c

ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIB_SRC  := $(sort $(wildcard src/base/*.c src/kernels/*.c src/tokenizer/*.c src/template/*.c \
                              src/model/*.c src/engine/*.c) \
                   $(filter-out src/server/server_main.c,$(wildcard src/server/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
SERVER_SRC := src/server/server_main.c
TEST_SRC := $(sort $(wildcard tests/test_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/webui_assets.o
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libllaisys.a
SETUP    := build/.setup-done

# The programs: statically linked in a normal build, dynamically in a sanitizer build.
CLI      ?= $(if $(SANITIZE),$(BUILD)/llaisys-cli,llaisys-cli)
SERVER   ?= $(if $(SANITIZE),$(BUILD)/llaisys-server,llaisys-server)

# The default model: a small random Qwen2 with the real DeepSeek-R1-Distill-Qwen tokenizer, so
# every feature runs without downloading weights. The benchmark model has the exact shapes of
# DeepSeek-R1-Distill-Qwen-1.5B (3.5 GB, generated on first `make bench`).
TOKENIZER     := models/deepseek-r1-distill-qwen-tokenizer
DEFAULT_MODEL := models/qwen2-small-random
BENCH_MODEL   ?= build/models/r1-1.5b-random
THREADS       ?= 2

.PHONY: all setup test unit run bench bench-spec clean
all: $(CLI) $(SERVER) $(if $(SANITIZE),,$(DEFAULT_MODEL)/config.json)

# The WebUI (webui/): npm packages pinned by webui/package-lock.json, bundled by esbuild into
# $(BUILD)/webui/, embedded in llaisys-server as a C table by webui/embed.mjs.
WEBUI_DEPS := webui/node_modules/.package-lock.json
$(WEBUI_DEPS): webui/package.json webui/package-lock.json | $(SETUP)
	npm ci --prefix webui --no-audit --no-fund
$(BUILD)/webui/index.html: $(WEBUI_DEPS) webui/build.mjs $(wildcard webui/src/*)
	node webui/build.mjs --out $(BUILD)/webui
$(BUILD)/webui_assets.c: $(BUILD)/webui/index.html webui/embed.mjs
	node webui/embed.mjs $(BUILD)/webui $@
$(BUILD)/webui_assets.o: $(BUILD)/webui_assets.c | $(SETUP)
	$(CC) $(CFLAGS) -Isrc/server -c $< -o $@

# The browser tests drive Debian's chromium with playwright-core (tests/webui/package-lock.json).
WEBUI_TEST_DEPS := tests/webui/node_modules/.package-lock.json
$(WEBUI_TEST_DEPS): tests/webui/package.json tests/webui/package-lock.json | $(SETUP)
	npm ci --prefix tests/webui --no-audit --no-fund

# The black-box server tests use the official OpenAI Node SDK (tests/server/package-lock.json).
NODE_DEPS := tests/server/node_modules/.package-lock.json
$(NODE_DEPS): tests/server/package.json tests/server/package-lock.json | $(SETUP)
	npm ci --prefix tests/server --no-audit --no-fund


$(DEFAULT_MODEL)/config.json: | $(CLI)
	./$(CLI) mkmodel --preset small --seed 0 --force --tokenizer $(TOKENIZER) $(DEFAULT_MODEL)

$(BENCH_MODEL)/config.json: | $(CLI)
	@mkdir -p $(dir $(BENCH_MODEL))
	./$(CLI) mkmodel --preset r1-1.5b --seed 0 --force --tokenizer $(TOKENIZER) $(BENCH_MODEL)

setup: $(SETUP)
$(SETUP): third_party/setup.sh third_party/cjson.sh third_party/microhttpd.sh third_party/debsrc.sh
	@./third_party/setup.sh
	@mkdir -p $(@D) && touch $@

$(BUILD)/%.o: %.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%_avx2.o: %_avx2.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

ifeq ($(SANITIZE),)
$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -static -o $@ $^ $(STATIC_LDLIBS)
$(SERVER): $(SERVER_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -static -o $@ $^ $(STATIC_LDLIBS)
else
$(CLI): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(SERVER): $(SERVER_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
endif

# Unit tests: one cmocka binary per module, linked dynamically.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# `make unit` builds and runs the unit tests of this $(BUILD) (used for the sanitizer pass).
unit: $(TESTS) $(CLI) $(SERVER) $(NODE_DEPS) $(WEBUI_TEST_DEPS)
	@LLAISYS_CLI=$(abspath $(CLI)) LLAISYS_SERVER=$(abspath $(SERVER)) ./tests/run.sh $(TESTS)

test: $(SETUP)
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory unit
	@echo "== again under AddressSanitizer + UndefinedBehaviorSanitizer =="
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit

run: all
	./$(SERVER) --model $(DEFAULT_MODEL)

# Benchmarks on the r1-1.5b-shaped model, $(THREADS) threads: model (load, RSS, pp128, pp512,
# tg128), GEMM kernels, tokenizer.
bench: all $(BENCH_MODEL)/config.json
	./$(CLI) bench --model $(BENCH_MODEL) --threads $(THREADS)
	./$(CLI) bench-engine --model $(BENCH_MODEL) --threads $(THREADS)
	./$(CLI) bench-serve --spawn ./$(SERVER) --model $(BENCH_MODEL) --clients 1,8,32 -- --threads $(THREADS)
	./$(CLI) bench-matmul --threads $(THREADS)
	./$(CLI) bench-tokenizer --model $(TOKENIZER)

# Speculative decoding, one stream, spec off and on: (a) a copy model (same shapes and cost)
# answering a prompt it repeats, (b) the random model's free text.
BENCH_COPY_MODEL ?= build/models/r1-1.5b-copy64
$(BENCH_COPY_MODEL)/config.json: | $(CLI)
	@mkdir -p $(dir $(BENCH_COPY_MODEL))
	./$(CLI) mkmodel --preset r1-1.5b --seed 0 --copy 64 --force --tokenizer $(TOKENIZER) $(BENCH_COPY_MODEL)
bench-spec: all $(BENCH_MODEL)/config.json $(BENCH_COPY_MODEL)/config.json
	for s in off ngram; do ./$(CLI) bench-engine --model $(BENCH_COPY_MODEL) --threads $(THREADS) --streams 1 --prompt 64 --gen 128 --long 0 --prompt-cycle 64 --spec $$s; done
	for s in off ngram; do ./$(CLI) bench-engine --model $(BENCH_MODEL) --threads $(THREADS) --streams 1 --prompt 64 --gen 128 --long 0 --spec $$s; done

clean:
	rm -rf build llaisys-cli llaisys-server

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(SERVER_OBJ:.o=.d) $(TEST_SRC:%.c=$(BUILD)/%.d)
