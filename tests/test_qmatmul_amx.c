/*
 * test_qmatmul_amx.c: the AMX int8 variant of the quantized GEMM (qmatmul_amx.c) and the tile
 * layer (amx_ops.h) it shares with the bf16 GEMM (matmul_amx.c, tested in test_matmul.c).
 *
 *   - The emulated tile layer against TDPBSSD computed by hand on crafted tiles (signed bytes,
 *     −128 · −128, accumulation onto loaded values, 32-bit wrap-around, the store writing only
 *     the configured rows and bytes), and against TDPBF16PS likewise (the even and odd sums, a
 *     rounding tie, denormals read as zero and flushed), so a wrong emulation cannot make a
 *     kernel agree with its reference by accident; and what the hardware faults on (a bad configuration, a tile used
 *     unconfigured, TDPBSSD on shapes that do not chain or on one tile twice) aborts it, each in
 *     a child process.
 *   - amx-emul (the kernel on emulated tiles, any CPU) against the scalar reference, bit for bit
 *     (memcmp): q8_0, q4_0 and q4_k, M in {16, 17, 31, 48, 130} (tails of 16 and 32 rows, thread
 *     ranges shorter than a tile), N not a multiple of 16 or 32, K of several blocks and of more
 *     than one slice (q4_k with a short last super-block), bias on and off, 1, 2 and 3 threads;
 *     M < 16 goes to the small-M variant with the same bits.
 *   - amx (the real tiles) the same where the CPU and Linux allow it; skipped with the reason
 *     printed ("SKIP amx: CPU lacks amx_tile", "permission refused: ...") elsewhere.
 *   - Dispatch, in child processes of this binary (the variant is chosen once per process): it
 *     never picks amx-emul, picks amx exactly when the tiles are usable, and with
 *     LLAISYS_KERNEL=avx512 picks the best non-AMX variant. A child whose
 *     arch_prctl(ARCH_REQ_XCOMP_PERM) a seccomp filter refuses picks the best non-AMX variant
 *     and computes the reference's bits at M = 32 (on an AMX CPU it also logs the refusal):
 *     where permission is refused, llaisys must not crash at the first tile instruction.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define LL_AMX_EMULATE
#include "amx_ops.h"
#include "dtype.h"
#include "isa.h"
#include "pool.h"
#include "qmatmul.h"
#include "quant.h"
#include "quant_support.h"

static struct ll_pool *pool2, *pool3;
static char default_variant[32];

/* ---- helpers ---- */

/* A quantized matrix that owns its planes: quantized from random f32 rows, or (random_planes)
 * every byte random (int8 −128 and every nibble and code), with scales random f16 in
 * ±[2⁻⁸, 2⁻⁴). */
struct qmat {
    struct ll_qweight w;
    uint8_t *qs;
    uint16_t *d;
};

static void qmat_make(struct qmat *q, enum ll_qtype t, int N, int K, int random_planes)
{
    size_t qb = ll_qweight_qs_bytes(t, N, K), db = ll_qweight_d_bytes(t, N, K);
    q->qs = xmalloc(qb);
    q->d = xmalloc(db);
    if (random_planes) {
        for (size_t i = 0; i < qb; i++)
            q->qs[i] = (uint8_t)(rng_next() >> 56);
        for (size_t i = 0; i < db / 2; i++)
            q->d[i] = (uint16_t)(rng_next() >> 48);
        for (size_t i = 0; i < db / 2; i++) /* q4_k: d and dmin are the first 32 of 128 */
            if (t != LL_Q4_K || i % 128 < 32)
                q->d[i] = rand_scale();
    } else {
        float *src = rand_f32((size_t)N * K, 0.1f);
        assert_int_equal(ll_quantize_rows(q->qs, q->d, t, src, LL_F32, N, K, 0, N, NULL), LL_OK);
        free(src);
    }
    assert_int_equal(ll_qweight_init(&q->w, t, N, K, q->qs, qb, q->d, db, NULL), LL_OK);
}

static void qmat_free(struct qmat *q)
{
    free(q->qs);
    free(q->d);
}

/* TDPBF16PS by hand (the SDM's pseudocode): C (tile 0) 2 rows × 2 f32, A (tile 1) 2 rows × 2 pairs
 * of bf16, B (tile 2) 2 pairs × 2 columns. Per element an even and an odd sum from zero, each a
 * chain of fused multiply-adds, then c + (even + odd):
 *   [0][0] A (4096, −4096, 1, 1), B (4096, 4096, 1, 1): even = 2²⁴ + 1 rounds to 2²⁴ (a tie, to
 *          even), odd = −2²⁴ + 1 exactly, c = 1 + 1 = 2 (one chain over all four products would
 *          give 1 + 2 = 3, the lanes of vdpbf16ps 1 + 1 = 2 only by another route)
 *   [0][1] B (2⁻⁶⁰, 2⁻⁶⁰, 0, 0): even 2⁻⁴⁸, odd −2⁻⁴⁸, c = 3 + 0 = 3
 *   [1][0] A (2⁻⁷⁰, 2⁻⁶⁶, 0, 0): 2⁻⁵⁸ + 2⁻⁵⁴ = 1.0625 · 2⁻⁵⁴, onto c = 2⁻¹⁴⁹ (denormal: read as 0)
 *   [1][1] even 2⁻⁷⁰ · 2⁻⁶⁰ = 2⁻¹³⁰ (denormal: flushed to 0), odd 2⁻¹²⁶: c = 2⁻¹²⁶ (unflushed,
 *          1.0625 · 2⁻¹²⁶) */
static void test_emul_tdpbf16ps(void **state)
{
    (void)state;
    struct amx_tilecfg cfg = {.palette = 1};
    cfg.rows[0] = 2, cfg.colsb[0] = 8;
    cfg.rows[1] = 2, cfg.colsb[1] = 8;
    cfg.rows[2] = 2, cfg.colsb[2] = 8;
#define BF(f) ll_f32_to_bf16(f)
    const uint16_t a[2][4] = {{BF(4096), BF(-4096), BF(1), BF(1)},
                              {BF(ldexpf(1, -70)), BF(ldexpf(1, -66)), 0, 0}};
    const uint16_t b[2][4] = {{BF(4096), BF(4096), BF(ldexpf(1, -60)), BF(ldexpf(1, -60))},
                              {BF(1), BF(1), 0, 0}};
#undef BF
    const float c0[2][2] = {{1.0f, 3.0f}, {ldexpf(1, -149), 0.0f}};
    const float want[2][2] = {{2.0f, 3.0f}, {ldexpf(1.0625f, -54), ldexpf(1, -126)}};
    float got[2][2];
    AMX_CONFIG(&cfg);
    AMX_LOAD(0, c0, 8);
    AMX_LOAD(1, a, 8);
    AMX_LOAD(2, b, 8);
    AMX_DPBF16PS(0, 1, 2);
    AMX_STORE(0, got, 8);
    AMX_RELEASE();
    for (int m = 0; m < 2; m++)
        for (int n = 0; n < 2; n++)
            if (memcmp(&got[m][n], &want[m][n], 4))
                fail_msg("TDPBF16PS [%d][%d]: %a, want %a", m, n, got[m][n], want[m][n]);
}

/* ---- the emulated tiles against hand-computed TDPBSSD ---- */

static void test_emul_tdpbssd(void **state)
{
    (void)state;
    /* C (tile 0): 2 rows × 3 int32; A (tile 1): 2 rows × 8 int8 (k = 0..7); B (tile 2): 2 rows
     * (k / 4) × 12 bytes (3 columns × 4 consecutive k) */
    struct amx_tilecfg cfg = {.palette = 1};
    cfg.rows[0] = 2, cfg.colsb[0] = 12;
    cfg.rows[1] = 2, cfg.colsb[1] = 8;
    cfg.rows[2] = 2, cfg.colsb[2] = 12;
    const int8_t a[2][8] = {{1, -2, 3, -4, 127, -128, 0, 5}, {-128, -128, -1, 2, 9, -7, 100, -100}};
    const int8_t b[2][16] = {{2, -3, 4, -5, 127, 127, -128, 1, 0, 1, -1, 7, 99, 99, 99, 99},
                             {-128, -128, -6, 3, 1, -1, 1, -1, 10, -20, 30, -40, 99, 99, 99, 99}};
    int32_t c0[2][4] = {{5, -5, INT32_MAX, 77}, {-1000, 0, INT32_MIN, 77}};
    /* c[m][n] = c0[m][n] + Σ_k a[m][k] · b[k / 4][4n + k % 4], products for k = 0..7:
     * [0][0]  5 + (2 + 6 + 12 + 20 − 16256 + 16384 + 0 + 15 = 183)              = 188
     * [0][1] −5 + (127 − 254 − 384 − 4 + 127 + 128 + 0 − 5 = −265)              = −270
     * [0][2] 2³¹−1 + (0 − 2 − 3 − 28 + 1270 + 2560 + 0 − 200 = 3597), wrapped    = −2147480052
     * [1][0] −1000 + (−256 + 384 − 4 − 10 − 1152 + 896 − 600 − 300 = −1042)     = −2042
     * [1][1]  0 + (−16256 − 16256 + 128 + 2 + 9 + 7 + 100 + 100)                = −32166
     * [1][2] −2³¹ + (0 − 128 + 1 + 14 + 90 + 140 + 3000 + 4000 = 7117)          = −2147476531 */
    const int32_t want[2][3] = {{188, -270, -2147480052}, {-2042, -32166, -2147476531}};
    int32_t got[3][4];
    memset(got, 0x5a, sizeof got);

    AMX_CONFIG(&cfg);
    AMX_LOAD(0, c0, 16);
    AMX_LOAD(1, a, 8);
    AMX_LOAD(2, b, 16); /* bytes 12..15 of each row are past colsb: not loaded */
    AMX_DPBSSD(0, 1, 2);
    AMX_STORE(0, got, 16);
    for (int m = 0; m < 2; m++) {
        for (int n = 0; n < 3; n++)
            assert_int_equal(got[m][n], want[m][n]);
        assert_int_equal(got[m][3], 0x5a5a5a5a); /* past colsb: not written */
    }
    for (int n = 0; n < 4; n++) /* past rows: not written */
        assert_int_equal(got[2][n], 0x5a5a5a5a);

    /* TILEZERO, then the same product from zero; a second TDPBSSD accumulates */
    AMX_ZERO(0);
    AMX_DPBSSD(0, 1, 2);
    AMX_DPBSSD(0, 1, 2);
    AMX_STORE(0, got, 16);
    assert_int_equal(got[0][0], 2 * 183);
    assert_int_equal(got[0][1], 2 * -265);
    assert_int_equal(got[0][2], 2 * 3597);
    assert_int_equal(got[1][0], 2 * -1042);
    assert_int_equal(got[1][1], 2 * -32166);
    assert_int_equal(got[1][2], 2 * 7117);
    AMX_RELEASE();
    assert_int_equal(amx_emul_state.configured, 0);
}

/* Configurations and uses of tiles the hardware faults on (#GP, #UD): the emulation must abort. */
static struct amx_tilecfg fault_cfg(void) /* C 2 × 12, A 2 × 8, B 2 × 12: a valid chain */
{
    struct amx_tilecfg c = {.palette = 1};
    c.rows[0] = 2, c.colsb[0] = 12, c.rows[1] = 2, c.colsb[1] = 8, c.rows[2] = 2, c.colsb[2] = 12;
    return c;
}

static void fault_palette(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.palette = 2;
    AMX_CONFIG(&c);
}

static void fault_colsb(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.colsb[3] = 68, c.rows[3] = 1;
    AMX_CONFIG(&c);
}

static void fault_rows(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.colsb[3] = 4, c.rows[3] = 17;
    AMX_CONFIG(&c);
}

static void fault_tile8(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.colsb[8] = 4, c.rows[8] = 1;
    AMX_CONFIG(&c);
}

static void fault_unconfigured(void)
{
    AMX_ZERO(0);
}

static void fault_unused_tile(void)
{
    struct amx_tilecfg c = fault_cfg();
    AMX_CONFIG(&c);
    AMX_ZERO(5);
}

static void fault_rows_mismatch(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.rows[1] = 3;
    AMX_CONFIG(&c);
    AMX_DPBSSD(0, 1, 2);
}

static void fault_k_mismatch(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.rows[2] = 3;
    AMX_CONFIG(&c);
    AMX_DPBSSD(0, 1, 2);
}

static void fault_same_tile(void)
{
    struct amx_tilecfg c = fault_cfg();
    c.rows[1] = 2, c.colsb[1] = 12;
    AMX_CONFIG(&c);
    AMX_DPBSSD(0, 1, 1);
}

static void valid_chain(void)
{
    struct amx_tilecfg c = fault_cfg();
    AMX_CONFIG(&c);
    AMX_ZERO(0);
    AMX_DPBSSD(0, 1, 2);
    AMX_RELEASE();
}

/* Run f in a child process; its wait status. */
static int run_child(void (*f)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2); /* the assertion's message */
        amx_emul_release();
        f();
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

static void test_emul_faults(void **state)
{
    (void)state;
    static void (*const cases[])(void) = {
        fault_palette,       fault_colsb,        fault_rows,
        fault_tile8,         fault_unconfigured, fault_unused_tile,
        fault_rows_mismatch, fault_k_mismatch,   fault_same_tile,
    };
    int st = run_child(valid_chain); /* the control: a valid chain runs to the end */
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st = run_child(cases[i]);
        if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT))
            fail_msg("fault case %zu: the emulation did not abort (status 0x%x)", i, st);
    }
}

/* ---- the kernel against the reference, bit for bit ---- */

/* Rows of activations with an all-zero block and a huge value (blocks of scale 0 and of
 * tiny scales next to normal ones). */
static float *act_rows(int M, int K)
{
    float *x = rand_f32((size_t)M * K, 2.0f);
    for (int i = 0; M > 1 && i < 32; i++)
        x[K + i] = 0.0f;
    if (M > 2)
        x[2 * K + K / 2] = 1e6f;
    return x;
}

static void check_shape(const char *variant, enum ll_qtype t, int M, int N, int K, int with_bias,
                        int random_planes)
{
    float *x = act_rows(M, K), *bias = with_bias ? rand_f32((size_t)N, 1.0f) : NULL;
    struct qmat q;
    qmat_make(&q, t, N, K, random_planes);
    size_t n_out = (size_t)M * N, sb = ll_qmatmul_scratch_bytes(M, K);
    float *ref = xmalloc(n_out * sizeof *ref), *got = xmalloc(n_out * sizeof *got);
    void *scratch = aligned_alloc(64, sb); /* exactly the size asked for: ASan sees overruns */
    assert_non_null(scratch);
    ll_qmatmul_ref(ref, x, &q.w, bias, M);
    struct ll_pool *pools[] = {NULL, pool2, pool3};
    for (int p = 0; p < 3; p++) {
        memset(got, 0xff, n_out * sizeof *got);
        ll_qmatmul(got, x, &q.w, bias, M, scratch, sb, pools[p]);
        char what[160];
        snprintf(what, sizeof what, "%s %s M=%d N=%d K=%d bias=%d random=%d threads=%d", variant,
                 ll_qtype_name(t), M, N, K, with_bias, random_planes, ll_pool_size(pools[p]));
        expect_same_bits(got, ref, n_out, what);
    }
    free(x);
    free(bias);
    free(ref);
    free(got);
    free(scratch);
    qmat_free(&q);
}

static void check_variant(const char *name)
{
    static const int ms[] = {16, 17, 31, 48, 130};
    static const int ns[] = {17, 50, 33};
    /* 3 blocks; 9 (q4_k: a super-block of 1 block after a full one); 17 (two slices of the
     * kernel, q4_k three super-blocks) */
    static const int ks[] = {96, 288, 544};
    rng_seed(5);
    int i = 0;
    for (int t = 0; t < 3; t++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++, i++)
                check_shape(name, (enum ll_qtype)t, ms[mi], ns[i % 3], ks[ki], i % 2, i % 4 < 2);
    for (int t = 0; t < 3; t++) { /* below 16 rows: the small-M variant, same bits */
        check_shape(name, (enum ll_qtype)t, 1, 33, 288, 1, 0);
        check_shape(name, (enum ll_qtype)t, 15, 17, 96, 0, 1);
    }
}

static void test_amx_emul(void **state)
{
    (void)state;
    assert_true(ll_qmatmul_set_variant("amx-emul"));
    assert_string_equal(ll_qmatmul_variant(), "amx-emul");
    check_variant("amx-emul");
    assert_true(ll_qmatmul_set_variant(default_variant));
}

static void test_amx(void **state)
{
    (void)state;
    const char *why = NULL;
    if (!ll_isa_amx_ready(&why) || !ll_qmatmul_set_variant("amx")) {
        printf("[  SKIP    ] SKIP amx: %s\n", why ? why : "CPU lacks AVX-512 VNNI");
        skip();
    }
    check_variant("amx");
    assert_true(ll_qmatmul_set_variant(default_variant));
}

/* ---- the tile probe (isa.h) ---- */

static int probe_status(int status)
{
    return status;
}

static int probe_trap(int arg)
{
    (void)arg;
    __builtin_trap(); /* ud2: SIGILL, as an instruction the CPU or the OS refuses */
}

static void test_probe(void **state)
{
    (void)state;
    char why[200] = "";
    /* how the child ends is read and said */
    assert_true(ll_isa_probe_child(probe_status, 0, why, sizeof why));
    assert_false(ll_isa_probe_child(probe_status, LL_AMX_PROBE_INT8, why, sizeof why));
    assert_string_equal(why, "the tile probe: TDPBSSD gave wrong sums");
    assert_false(ll_isa_probe_child(probe_status, LL_AMX_PROBE_BF16, why, sizeof why));
    assert_string_equal(why, "the tile probe: TDPBF16PS gave wrong sums");
    assert_false(ll_isa_probe_child(probe_status, 3, why, sizeof why));
    assert_string_equal(why, "the tile probe's process exited with status 3");
    assert_false(ll_isa_probe_child(probe_trap, 0, why, sizeof why));
    assert_non_null(strstr(why, "the tile probe's process died of signal 4"));
    printf("probe of a faulting instruction: %s\n", why);
    /* the probe's sums are those of the tiles' semantics */
    assert_int_equal(ll_amx_probe_emul(0), 0);
    assert_int_equal(ll_amx_probe_emul(1), 0);
    assert_true(ll_isa_probe_child(ll_amx_probe_emul, 1, why, sizeof why));
    /* the real tiles, where this process may use them, passed it */
    const char *amx_why = NULL;
    if (ll_isa_amx_ready(&amx_why)) {
        assert_true(ll_isa_probe_child(ll_amx_probe, ll_isa_cpu_amx_bf16(), why, sizeof why));
        assert_int_equal(ll_amx_probe(ll_isa_cpu_amx_bf16()), 0);
    } else {
        printf("SKIP probe of the real tiles: %s\n", amx_why);
    }
}

/* ---- dispatch, in child processes ---- */

/* The variant a fresh process of this binary picks with LLAISYS_KERNEL set to kernel (NULL:
 * unset), into out. */
static void child_variant(const char *kernel, char *out, size_t size)
{
    char self[512], cmd[700];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "env -u LLAISYS_KERNEL %s%s '%s' --print-variant",
             kernel ? "LLAISYS_KERNEL=" : "", kernel ? kernel : "", self);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    assert_non_null(fgets(out, (int)size, f));
    assert_int_equal(pclose(f), 0);
    out[strcspn(out, "\n")] = '\0';
}

/* Make arch_prctl(ARCH_REQ_XCOMP_PERM, ...) fail with EPERM in this process; false if seccomp
 * is not available. */
static bool deny_amx_permission(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_arch_prctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof f / sizeof f[0]), .filter = f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* The child of test_dispatch_refused: permission denied, then the variant and whether an
 * M = 32 q8_0 call gives the reference's bits. */
static int child_refused(void)
{
    if (!deny_amx_permission()) {
        printf("no-seccomp %s\n", strerror(errno));
        return 0;
    }
    printf("variant %s\n", ll_qmatmul_variant());
    const int M = 32, N = 40, K = 96;
    struct qmat q;
    rng_seed(9);
    qmat_make(&q, LL_Q8_0, N, K, 1);
    float *x = rand_f32((size_t)M * K, 1.0f), *ref = xmalloc((size_t)M * N * sizeof *ref);
    float *got = xmalloc((size_t)M * N * sizeof *got);
    size_t sb = ll_qmatmul_scratch_bytes(M, K);
    void *scratch = aligned_alloc(64, sb);
    ll_qmatmul_ref(ref, x, &q.w, NULL, M);
    ll_qmatmul(got, x, &q.w, NULL, M, scratch, sb, NULL);
    printf("result %s\n", memcmp(got, ref, (size_t)M * N * sizeof *got) ? "differs" : "same");
    free(x), free(ref), free(got), free(scratch);
    qmat_free(&q);
    return 0;
}

static void test_dispatch_refused(void **state)
{
    (void)state;
    static const char *const below[] = {"avx512vnni", "avxvnni", "avx2", "scalar"};
    const char *best = NULL;
    for (size_t i = 0; !best && i < sizeof below / sizeof below[0]; i++)
        if (ll_qmatmul_set_variant(below[i]))
            best = below[i];
    const int amx = ll_isa_amx_ready(NULL);
    assert_true(ll_qmatmul_set_variant(default_variant));

    char self[512], cmd[700], line[512], want[80];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    snprintf(cmd, sizeof cmd, "env -u LLAISYS_KERNEL '%s' --deny-amx 2>&1", self);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    int seen_variant = 0, seen_same = 0, seen_refusal = 0;
    snprintf(want, sizeof want, "variant %s\n", best);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "no-seccomp", 10)) {
            pclose(f);
            printf("[  SKIP    ] permission refused in a child: seccomp unavailable (%s)", line);
            skip();
        }
        seen_variant += !strcmp(line, want);
        seen_same += !strcmp(line, "result same\n");
        seen_refusal += strstr(line, "permission refused") != NULL;
    }
    assert_int_equal(pclose(f), 0);
    assert_int_equal(seen_variant, 1);
    assert_int_equal(seen_same, 1);
    if (amx) /* on a CPU that could run the tiles, the refusal is said */
        assert_int_equal(seen_refusal, 1);
    printf("permission refused: %s, same bits%s\n", best,
           amx ? ", refusal logged" : " (this CPU has no AMX: the refusal path is not reached)");
}

static void test_dispatch(void **state)
{
    (void)state;
    /* the best variant below AMX that this CPU runs, in dispatch's order */
    static const char *const below[] = {"avx512vnni", "avxvnni", "avx2", "scalar"};
    const char *best = NULL;
    for (size_t i = 0; !best && i < sizeof below / sizeof below[0]; i++)
        if (ll_qmatmul_set_variant(below[i]))
            best = below[i];
    assert_non_null(best);
    const int amx = ll_qmatmul_set_variant("amx");
    assert_true(ll_qmatmul_set_variant(default_variant));
    assert_string_not_equal(default_variant, "amx-emul");
    if (!getenv("LLAISYS_KERNEL"))
        assert_string_equal(default_variant, amx ? "amx" : best);

    char v[64];
    child_variant(NULL, v, sizeof v);
    assert_string_equal(v, amx ? "amx" : best);
    child_variant("amx", v, sizeof v);
    assert_string_equal(v, amx ? "amx" : best);
    child_variant("avx512", v, sizeof v);
    assert_string_equal(v, best);
    printf("dispatch: %s unset and with LLAISYS_KERNEL=amx, %s with avx512\n", amx ? "amx" : best,
           best);
}

static int setup(void **state)
{
    (void)state;
    snprintf(default_variant, sizeof default_variant, "%s", ll_qmatmul_variant());
    printf("qmatmul variant: %s\n", default_variant);
    return ll_pool_create(&pool2, 2, NULL) == LL_OK && ll_pool_create(&pool3, 3, NULL) == LL_OK
               ? 0
               : -1;
}

static int teardown(void **state)
{
    (void)state;
    ll_pool_free(pool2);
    ll_pool_free(pool3);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--print-variant")) { /* the child of test_dispatch */
        printf("%s\n", ll_qmatmul_variant());
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--deny-amx"))
        return child_refused();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emul_tdpbssd),
        cmocka_unit_test(test_emul_tdpbf16ps),
        cmocka_unit_test(test_emul_faults),
        cmocka_unit_test(test_probe),
        cmocka_unit_test(test_amx_emul),
        cmocka_unit_test(test_amx),
        cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_dispatch_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
