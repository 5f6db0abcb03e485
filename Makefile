# llaisys Makefile: objects under $(BUILD)/, programs at the top level.
#
#   make            build the programs, the library (build/libllaisys.so, .a) and the default model
#   make install PREFIX=DIR   install llaisys.h, the libraries, llaisys.pc and the Python package
#   make test       set up, build, run every test (plain, then under ASan+UBSan)
#   make run        set up, build, serve the default model at http://127.0.0.1:8000
#   make bench      run the benchmarks (see README)
#   make bench-spec speculative decoding on and off, one stream (see README)
#   make tsan       the engine and server tests under ThreadSanitizer; fails on any report
#   make fuzz       every libFuzzer target of tests/fuzz/ for FUZZ_SECONDS each (clang)
#   make check-all  make test, then make tsan, then make fuzz (FUZZ_SECONDS=300)
#   make format     rewrite the C sources in the style of .clang-format (format-check: list only)
#   make SANITIZE=address|undefined|address,undefined|thread ...   sanitizer build (own $(BUILD))

# `make` alone builds `all` (rules above it, such as the objects' stamp, would otherwise be the goal).
.DEFAULT_GOAL := all

CC       ?= gcc
SANITIZE ?=
# FUZZ=1 (set by `make fuzz`): the libFuzzer build, clang with ASan+UBSan into build/fuzz.
ifeq ($(FUZZ),1)
CC       := clang
SANITIZE := fuzzer-no-link,address,undefined
BUILD    := build/fuzz
endif
BUILD    ?= build$(if $(SANITIZE),/san-$(subst $(comma),-,$(SANITIZE)))
comma    := ,
TP       := build/third_party

# Base flags target plain x86-64 (with SSE4.2/AVX2-free code); SIMD kernels live in files named
# *_avx2.c / *_avxvnni.c / *_avx512.c / *_vnni512.c / *_amx.c that get their own flags and are chosen at run
# time by CPU features.
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -MMD -MP \
            -Iinclude -I$(TP)/cjson/include -I$(TP)/microhttpd/include
# Built from Debian source packages by third_party/ (Debian ships no usable static archive).
TP_LIBS  := $(TP)/microhttpd/lib/libmicrohttpd.a $(TP)/cjson/libcjson.a
LDLIBS   := $(TP_LIBS) -lutf8proc -lopenblas -lm -pthread
STATIC_LDLIBS := $(TP_LIBS) -lutf8proc -lopenblas -lgfortran -lquadmath -lm -pthread
AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c
AVXVNNI_FLAGS  := $(AVX2_FLAGS) -mavxvnni
VNNI512_FLAGS  := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c
AMX_FLAGS      := $(VNNI512_FLAGS) -mamx-tile -mamx-int8 -mamx-bf16

ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
ifeq ($(FUZZ),1)
# clang (14) warns about designated-initializer tables that leave trailing fields zero, as C
# allows (engine_opts.c); gcc does not.
CFLAGS  += -Wno-missing-field-initializers
endif

LIB_SRC  := $(sort $(wildcard src/base/*.c src/kernels/*.c src/tokenizer/*.c src/template/*.c \
                              src/model/*.c src/engine/*.c src/api/*.c) \
                   $(filter-out src/server/server_main.c,$(wildcard src/server/*.c)))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
SERVER_SRC := src/server/server_main.c
TEST_SRC := $(sort $(wildcard tests/test_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
# qmatmul_amx.c, matmul_amx.c and probe_amx.c are compiled a second time with their tiles
# emulated in C (the amx-emul variants, the probe's emulated twin).
LIB_OBJ  += $(BUILD)/src/kernels/qmatmul_amx_emul.o $(BUILD)/src/kernels/matmul_amx_emul.o \
            $(BUILD)/src/kernels/probe_amx_emul.o
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(BUILD)/%.o) $(BUILD)/webui_assets.o
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# What several unit tests share (tests/*.c not named test_*), linked into every test binary
# through an archive: a test pulls in only the helpers it calls.
TEST_SUPPORT := $(BUILD)/tests/libsupport.a
TEST_SUPPORT_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out $(TEST_SRC) tests/api_example.c,$(wildcard tests/*.c)))

# The ThreadSanitizer build (SANITIZE=thread, used by `make tsan`) and the fuzz build (FUZZ=1):
# - cJSON is compiled in from its source, instrumented, so that races on its globals show and
#   libFuzzer sees the JSON parser's coverage (the prebuilt archive is not instrumented).
# - (TSan) The GEMM kernels (src/kernels/matmul*.c) are not instrumented. Their inner loops are most of
#   TSan's cost (the engine tests take twice as long, and decoding gets too slow for the server
#   tests' time limits); their workers write disjoint output columns and meet only at the pool's
#   barrier (pool.c, instrumented), and test_matmul checks them at several thread counts.
ifneq ($(filter thread,$(subst $(comma), ,$(SANITIZE))),)
TSAN_PLAIN := $(filter $(BUILD)/src/kernels/matmul%.o,$(LIB_OBJ))
$(TSAN_PLAIN): CFLAGS := $(filter-out -fsanitize=thread,$(CFLAGS))
endif
ifneq ($(filter thread fuzzer-no-link,$(subst $(comma), ,$(SANITIZE))),)
LIB_OBJ  += $(BUILD)/third_party/cJSON.o
LDLIBS   := $(filter-out $(TP)/cjson/libcjson.a,$(LDLIBS))
$(BUILD)/third_party/cJSON.o: $(TP)/cjson-src/cJSON.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) -O2 -g -std=c99 -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -c $< -o $@
endif
LIB      := $(BUILD)/libllaisys.a
SETUP    := build/.setup-done

# The library: its objects are position-independent with hidden symbols, so the same objects
# make the static archive (which the programs and the unit tests link) and the shared library,
# which exports only include/llaisys.h's API (LLAISYS_API, and src/api/llaisys.map for what
# comes from static archives). Its soname carries LLAISYS_API_VERSION.
API_VERSION := $(shell sed -n 's/^\#define LLAISYS_API_VERSION \([0-9]*\).*/\1/p' include/llaisys.h)
SO       := $(BUILD)/libllaisys.so
SONAME   := libllaisys.so.$(API_VERSION)
API_OBJ  := $(filter $(BUILD)/src/api/%,$(LIB_OBJ))
$(LIB_OBJ): CFLAGS += -fPIC -fvisibility=hidden
# Objects compiled before those flags existed rebuild once: they are older than this stamp.
LIB_STAMP := $(BUILD)/.lib-objects-pic
$(LIB_OBJ): $(LIB_STAMP)
$(LIB_STAMP):
	@mkdir -p $(@D) && touch $@
PREFIX   ?= /usr/local
# `make test` installs into this prefix and builds tests/api_example.c against it (pkg-config).
TEST_PREFIX := $(abspath $(BUILD))/prefix
API_EXAMPLE := $(BUILD)/tests/api_example

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

.PHONY: all setup test unit tsan tsan-run fuzz fuzz-build fuzz-run check-all format format-check run bench bench-python bench-spec bench-llama clean install
all: $(CLI) $(SERVER) $(SO) $(if $(SANITIZE),,$(DEFAULT_MODEL)/config.json)

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

$(BUILD)/%_avxvnni.o: %_avxvnni.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AVXVNNI_FLAGS) -c $< -o $@

$(BUILD)/%_vnni512.o: %_vnni512.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(VNNI512_FLAGS) -c $< -o $@

# (kernels only: tests/test_qmatmul_amx.c is plain C)
$(BUILD)/src/kernels/%_amx.o: src/kernels/%_amx.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(AMX_FLAGS) -c $< -o $@

$(BUILD)/src/kernels/%_amx_emul.o: src/kernels/%_amx.c | $(SETUP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DLL_AMX_EMULATE -c $< -o $@

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

$(SO): $(API_OBJ) $(LIB) src/api/llaisys.map
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/api/llaisys.map \
	    -Wl,--exclude-libs,ALL -Wl,--no-undefined -o $@ $(API_OBJ) $(LIB) $(TP)/cjson/libcjson.a \
	    -lutf8proc -lopenblas -lm -pthread

# install: the header, the shared library (with its soname link), a static archive that
# carries cJSON (so -lllaisys needs only Debian's libraries), llaisys.pc, and the Python package
# (python/llaisys, told where the library was installed).
# Debian's python3 looks in /usr/lib/python3/dist-packages and /usr/local/lib/python3.X/...
PYDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(shell \
          /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || \
          echo 3)/dist-packages)
install: $(SO) $(LIB) include/llaisys.h src/api/llaisys.pc.in $(wildcard python/llaisys/*.py)
	@set -e; d="$(DESTDIR)$(PREFIX)"; py="$(DESTDIR)$(PYDIR)/llaisys"; \
	install -d "$$d/include" "$$d/lib/pkgconfig" "$$py"; \
	install -m 644 include/llaisys.h "$$d/include/"; \
	install -m 755 $(SO) "$$d/lib/$(SONAME)"; ln -sf $(SONAME) "$$d/lib/libllaisys.so"; \
	tmp=$$(mktemp -d); cp $(LIB) "$$tmp/libllaisys.a"; \
	(cd "$$tmp" && ar x $(abspath $(TP)/cjson/libcjson.a) && ar rs libllaisys.a cJSON.o 2>/dev/null); \
	install -m 644 "$$tmp/libllaisys.a" "$$d/lib/"; rm -rf "$$tmp"; \
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(API_VERSION).0|' src/api/llaisys.pc.in \
	    >"$$d/lib/pkgconfig/llaisys.pc"; \
	install -m 644 python/llaisys/*.py "$$py/"; \
	echo 'LIBRARY = "$(PREFIX)/lib/$(SONAME)"' >"$$py/_installed.py"; \
	echo "installed llaisys (API $(API_VERSION)) into $(DESTDIR)$(PREFIX), Python package into $$py"

$(TEST_PREFIX)/lib/pkgconfig/llaisys.pc: $(SO) $(LIB) include/llaisys.h src/api/llaisys.pc.in \
                                         $(wildcard python/llaisys/*.py)
	@$(MAKE) --no-print-directory install PREFIX=$(TEST_PREFIX) >/dev/null

# The API example, built as an application would: C99, against the installed library.
$(API_EXAMPLE): tests/api_example.c $(TEST_PREFIX)/lib/pkgconfig/llaisys.pc
	@mkdir -p $(@D)
	PKG_CONFIG_PATH=$(TEST_PREFIX)/lib/pkgconfig; export PKG_CONFIG_PATH; \
	$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -O1 -g \
	    $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer) \
	    $$(pkg-config --cflags llaisys) $< -o $@ $$(pkg-config --libs llaisys) \
	    -Wl,-rpath,$$(pkg-config --variable=libdir llaisys)

# Unit tests: one cmocka binary per module, linked dynamically.
# test_qmatmul_amx checks the kernels' private tile layer (src/kernels/amx_ops.h) directly.
$(BUILD)/tests/test_qmatmul_amx.o: CFLAGS += -Isrc/kernels
# test_matmul asks isa.h whether the AMX tiles can run here.
$(BUILD)/tests/test_matmul.o: CFLAGS += -Isrc/kernels
# test_tokenizer checks the pre-tokenizer's split (src/tokenizer/tokenizer_impl.h) by itself.
$(BUILD)/tests/test_tokenizer.o: CFLAGS += -Isrc/tokenizer
$(TEST_SUPPORT): $(TEST_SUPPORT_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUPPORT) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

# `make unit` builds and runs the unit tests of this $(BUILD) (used for the sanitizer pass).
unit: $(TESTS) $(CLI) $(SERVER) $(SO) $(API_EXAMPLE) $(NODE_DEPS) $(WEBUI_TEST_DEPS)
	@LLAISYS_CLI=$(abspath $(CLI)) LLAISYS_SERVER=$(abspath $(SERVER)) \
	    LLAISYS_LIBRARY=$(abspath $(SO)) LLAISYS_API_EXAMPLE=$(abspath $(API_EXAMPLE)) \
	    LLAISYS_PREFIX=$(TEST_PREFIX) LLAISYS_SANITIZE=$(SANITIZE) ./tests/run.sh $(TESTS)

test: $(SETUP)
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory fuzz-build
	@$(MAKE) --no-print-directory unit
	@echo "== again under AddressSanitizer + UndefinedBehaviorSanitizer =="
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit

# `make tsan`: the engine and server tests against a ThreadSanitizer build (build/san-thread):
# the unit tests below (the engine, its thread pool, the server's parts, and the tokenizer and
# template that every HTTP thread shares), tests/cli_server.sh (with the SDK suite) and
# tests/cli_responses.sh on its llaisys-server. Every process writes its reports to
# build/san-thread/tsan-logs/tsan.PID (and exits 66 after one); any report fails the target and
# is printed at the end.
TSAN_TESTS := test_engine test_sampling_controls test_pool test_server test_live test_tokenizer \
              test_template
tsan: $(SETUP)
	@$(MAKE) --no-print-directory SANITIZE=thread tsan-run

TSAN_LOG := $(BUILD)/tsan-logs
tsan-run: $(TSAN_TESTS:%=$(BUILD)/tests/%) $(SERVER) $(NODE_DEPS)
	@case "$(SANITIZE)" in *thread*) ;; *) echo "tsan-run: use make tsan" >&2; exit 2 ;; esac
	@rm -rf $(TSAN_LOG) && mkdir -p $(TSAN_LOG)
	@TSAN_OPTIONS="log_path=$(abspath $(TSAN_LOG))/tsan exitcode=66 second_deadlock_stack=1" \
	    LLAISYS_SERVER=$(abspath $(SERVER)) \
	    ./tests/run.sh $(TSAN_TESTS:%=$(BUILD)/tests/%) tests/cli_server.sh tests/cli_responses.sh; \
	    rc=$$?; \
	if [ -n "$$(ls $(TSAN_LOG))" ]; then \
	    cat $(TSAN_LOG)/*; \
	    echo "tsan: $$(cat $(TSAN_LOG)/* | grep -c '^WARNING: ThreadSanitizer') reports in $(TSAN_LOG)"; \
	    exit 1; \
	fi; \
	[ $$rc -eq 0 ] && echo "tsan: no reports"; exit $$rc

# Fuzzing (tests/fuzz/, README "Fuzzing"): one libFuzzer target per parser, built by clang with
# ASan+UBSan (FUZZ=1: objects in build/fuzz, instrumented for coverage with fuzzer-no-link).
# The targets link the library's archive built so. `make fuzz` runs each target for FUZZ_SECONDS, one after the
# other (tests/fuzz/fuzz.sh: seeds from tests/fuzz/corpus/NAME, the growing corpus in
# build/fuzz/corpus/NAME, findings in build/fuzz/findings/); `make test` builds them and
# tests/cli_fuzz.sh runs each for a few seconds.
FUZZ_SECONDS ?= 60
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS  := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
fuzz: $(SETUP)
	@$(MAKE) --no-print-directory FUZZ=1 fuzz-run
fuzz-build: $(SETUP)
	@$(MAKE) --no-print-directory FUZZ=1 $(FUZZ_BINS)
fuzz-run: $(FUZZ_BINS)
	@case "$(FUZZ)" in 1) ;; *) echo "fuzz-run: use make fuzz" >&2; exit 2 ;; esac
	@./tests/fuzz/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)
ifeq ($(FUZZ),1)
$(BUILD)/tests/fuzz/%.o: CFLAGS += -Isrc/server
# The kernels parse nothing: gcc builds them uninstrumented (clang 14's __builtin_cpu_supports
# does not know "f16c").
FUZZ_PLAIN := $(filter $(BUILD)/src/kernels/%,$(LIB_OBJ))
$(FUZZ_PLAIN): CC := gcc
$(FUZZ_PLAIN): CFLAGS := $(filter-out -fsanitize=% -fno-sanitize-recover=% -Wno-missing-field-initializers,\
                                      $(CFLAGS)) -fPIC -fvisibility=hidden
.SECONDARY: $(FUZZ_SRC:%.c=$(BUILD)/%.o)
$(BUILD)/fuzz_%: $(BUILD)/tests/fuzz/fuzz_%.o $(LIB)
	$(CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)
endif

# `make check-all`: everything, longer than `make test`: the tests, ThreadSanitizer (about
# 5 minutes on 2 cores, build included, so not in `make test`), and each fuzz target for 5
# minutes.
check-all:
	@$(MAKE) --no-print-directory test
	@$(MAKE) --no-print-directory tsan
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=300

# `make format` rewrites the C sources with Debian 12's clang-format (14) and .clang-format;
# `make format-check` only lists what it would change. Neither installs anything.
CLANG_FORMAT ?= clang-format
FORMAT_SRC := $(sort $(wildcard src/*/*.[ch] include/*.h tests/*.[ch]))
format format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "make $@: $(CLANG_FORMAT) not found;" \
	    "install it (Debian: apt-get install clang-format) or set CLANG_FORMAT=" >&2; exit 1; }
	@$(CLANG_FORMAT) $(if $(filter format,$@),-i,--dry-run --Werror) $(FORMAT_SRC)

run: all
	./$(SERVER) --model $(DEFAULT_MODEL)

# Benchmarks on the r1-1.5b-shaped model, $(THREADS) threads: model (load, RSS, pp128, pp512,
# tg128), GEMM kernels, tokenizer.
bench: all $(BENCH_MODEL)/config.json
	./$(CLI) bench --model $(BENCH_MODEL) --threads $(THREADS)
	./$(CLI) bench-engine --model $(BENCH_MODEL) --threads $(THREADS)
	./$(CLI) bench-serve --spawn ./$(SERVER) --model $(BENCH_MODEL) --clients 1,8,32 -- --threads $(THREADS)
	./$(CLI) bench-matmul --threads $(THREADS)
	./$(CLI) bench-matmul --threads $(THREADS) --wtype bf16p --paired --m 1
	./$(CLI) bench-tokenizer --model $(TOKENIZER)
	$(MAKE) --no-print-directory bench-python

# The Python path against the C engine (python/llaisys/bench.py): the same streams through
# one library call, a Python step/collect loop, and a Python stream.
bench-python: all $(BENCH_MODEL)/config.json
	PYTHONPATH=python LLAISYS_LIBRARY=$(abspath $(SO)) /usr/bin/python3 -m llaisys.bench \
	    --model $(BENCH_MODEL) --threads $(THREADS) --streams 1,16 --prompt 128 --gen 32

# llaisys against llama.cpp on the same weights, alternating runs (tests/side_by_side.sh), tg128
# for every format, then pp512: LLAMA_BENCH=.../llama-bench, GGUF_DIR holding
# r1-1.5b-{bf16,q8_0,q4_0,q4_k_m}.gguf converted from $(BENCH_MODEL) (shared/BENCHMARKS.md).
bench-llama: all $(BENCH_MODEL)/config.json
	LLAMA_BENCH=$(LLAMA_BENCH) MODEL_NAME=r1-1.5b THREADS=$(THREADS) sh tests/side_by_side.sh $(BENCH_MODEL) $(GGUF_DIR)
	LLAMA_BENCH=$(LLAMA_BENCH) MODEL_NAME=r1-1.5b THREADS=$(THREADS) TEST=pp512 sh tests/side_by_side.sh $(BENCH_MODEL) $(GGUF_DIR) "none:bf16 q4_0:q4_0 q4_k_m:q4_k_m"

# Speculative decoding, one stream, spec off and on: (a) a copy model (same shapes and cost)
# answering a prompt it repeats, (b) the random model's free text.
BENCH_COPY_MODEL ?= build/models/r1-1.5b-copy64
$(BENCH_COPY_MODEL)/config.json: | $(CLI)
	@mkdir -p $(dir $(BENCH_COPY_MODEL))
	./$(CLI) mkmodel --preset r1-1.5b --seed 0 --untied --copy 64 --force --tokenizer $(TOKENIZER) $(BENCH_COPY_MODEL)
bench-spec: all $(BENCH_MODEL)/config.json $(BENCH_COPY_MODEL)/config.json
	for s in off ngram; do ./$(CLI) bench-engine --model $(BENCH_COPY_MODEL) --threads $(THREADS) --streams 1 --prompt 64 --gen 128 --long 0 --prompt-cycle 64 --spec $$s; done
	for s in off ngram; do ./$(CLI) bench-engine --model $(BENCH_MODEL) --threads $(THREADS) --streams 1 --prompt 64 --gen 128 --long 0 --spec $$s; done

clean:
	rm -rf build llaisys-cli llaisys-server

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(SERVER_OBJ:.o=.d) $(TEST_SRC:%.c=$(BUILD)/%.d) \
         $(TEST_SUPPORT_OBJ:.o=.d) $(if $(filter 1,$(FUZZ)),$(FUZZ_SRC:%.c=$(BUILD)/%.d))
