/* Fused loops of the bootstrap's cell draws and of the calibrated band's studentised maxima (memtui.engine.kernels).

   The numpy code in did.py (_Stack.cell_draws) and bands.py (_studentise_numpy) makes about thirty passes over a
   block of cells x draws, each an array of its own; this loop makes the same float32 operations element by element,
   in the same order, in one pass over each cell's draws: each operation is IEEE-rounded as numpy rounds it, so the
   results are the numpy code's bit for bit. That holds only without contraction of a multiply and an add into one
   fused operation and without fast-math: setup.py compiles this file with -ffp-contract=off. Plain C, no Python
   API: loaded with ctypes, which releases the GIL for the call. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define TILE 256 /* draws of one cell held in locals (L1) between the draw and its studentisation */

/* What the calibrated band does with a block's draws (bands._Studentiser): the studentised squares
   D*^2 / max(var - k_t T*^2 - k_c C*^2, 0) (0 / 0 taken as 0), in units of the outcome's sd (unit = 1 / sd), each
   folded into the running maximum of its cell's group of cells (row label[k] of group_max, rows gm_stride apart;
   -1: a cell in no mask). With agg_ptr, the aggregates' re-centring sums too: cell k enters the aggregates
   agg_row[e], e in agg_ptr[k] .. agg_ptr[k + 1] - 1 (agg_ptr indexed by the block's cells), with coefficients
   coef_t[e] on its unit-scaled T*^2 and coef_c[e] on its unit-scaled C*, added into rows agg_row[e] of acc_t and acc_c
   (rows acc_stride apart), and coef_w[e] on its draw into acc_w (the aggregates' weighted draws, summaries.aggregate):
   as scipy's csr_matvecs adds y += a * x over a row's columns in ascending order, the cells being visited in
   ascending order. */
typedef struct {
    float unit;
    const float *k_t, *k_c, *var;
    const int64_t *label;
    float *group_max;
    int64_t gm_stride;
    const int64_t *agg_ptr, *agg_row; /* agg_ptr NULL: no aggregates */
    const float *coef_t, *coef_c, *coef_w;
    float *acc_t, *acc_c, *acc_w;
    int64_t acc_stride;
} studentise_t;

/* The interface's version and studentise_t's layout, which memtui.engine.kernels compares with its ctypes mirror when
   it loads this library: a struct or a signature that drifted from the Python side would corrupt memory silently, so a
   build that does not match (a stale .so beside newer Python, or the reverse) is not called. Bump KERNELS_ABI with any
   change of cell_draws' arguments or of studentise_t. */
#ifndef KERNELS_ABI
#define KERNELS_ABI 1
#endif

int64_t kernels_abi(void) { return KERNELS_ABI; }

/* studentise_t's size in out[0] and its fields' offsets in out[1..], at most n values in all; returns how many fields
   it has. */
int64_t studentise_layout(int64_t *out, int64_t n)
{
    const int64_t layout[] = {
        sizeof(studentise_t),
        offsetof(studentise_t, unit), offsetof(studentise_t, k_t), offsetof(studentise_t, k_c),
        offsetof(studentise_t, var), offsetof(studentise_t, label), offsetof(studentise_t, group_max),
        offsetof(studentise_t, gm_stride), offsetof(studentise_t, agg_ptr), offsetof(studentise_t, agg_row),
        offsetof(studentise_t, coef_t), offsetof(studentise_t, coef_c), offsetof(studentise_t, coef_w),
        offsetof(studentise_t, acc_t), offsetof(studentise_t, acc_c), offsetof(studentise_t, acc_w),
        offsetof(studentise_t, acc_stride),
    };
    const int64_t total = (int64_t)(sizeof(layout) / sizeof(layout[0]));
    for (int64_t i = 0; i < n && i < total; i++)
        out[i] = layout[i];
    return total - 1;
}

/* One block of cells of one layout, as _Stack.cell_draws: its draws into out (rows out_stride apart: a view into the
   draws of every chunk) and, where treated is not NULL, the cohort's and the control set's parts into treated and
   ctrl (cells x bc); where st is not NULL, the studentised maxima of those draws (studentise_t) instead of leaving
   the parts to the numpy code. r: each group's multiplier-weighted sums (rows x bc); cum_r, w, cum_w: their prefix
   sums, the groups' multiplier sums and their prefix sums. The index arrays give the cells' rows in them (col added
   to those of r and cum_r: the layout's columns in its stack). any_own: whether some cell of the block has its own
   cohort in its control set (the numpy code only then subtracts own * x, and 0 * x from the other cells too). */
void cell_draws(int64_t n_cells, int64_t bc, const float *r, const float *cum_r, const float *w, const float *cum_w,
                const int64_t *own_t, const int64_t *own_b, const int64_t *ctrl_t, const int64_t *ctrl_b,
                int64_t col, const int64_t *group, const int64_t *prefix, const uint8_t *own, int any_own,
                const float *inv_nt, const float *inv_nc, const float *dm, const float *dmu, float *out,
                int64_t out_stride, float *treated, float *ctrl, const studentise_t *st)
{
    float tr[TILE], cr[TILE];
    for (int64_t k = 0; k < n_cells; k++) {
        const float is_own = own[k] ? 1.0f : 0.0f, a = dm[k], n_t = inv_nt[k], c = dmu[k], n_c = inv_nc[k];
        float *gm = st && st->label[k] >= 0 ? st->group_max + st->label[k] * st->gm_stride : 0;
        for (int64_t d0 = 0; d0 < bc; d0 += TILE) {
            const int64_t n = bc - d0 < TILE ? bc - d0 : TILE;
            const float *wo = w + group[k] * bc + d0, *cw = cum_w + prefix[k] * bc + d0;
            const float *rt = r + (own_t[k] + col) * bc + d0, *rb = r + (own_b[k] + col) * bc + d0;
            const float *ct = cum_r + (ctrl_t[k] + col) * bc + d0, *cb = cum_r + (ctrl_b[k] + col) * bc + d0;
            float *o = out + k * out_stride + d0;
            if (any_own) {
                for (int64_t d = 0; d < n; d++) {
                    const float ctrl_w = cw[d] - is_own * wo[d];
                    const float d_own = rt[d] - rb[d];
                    const float t = (d_own - wo[d] * a) * n_t;
                    float x = ct[d] - cb[d];
                    x = x - is_own * d_own;
                    x = x - ctrl_w * c;
                    x = x * n_c;
                    tr[d] = t;
                    cr[d] = x;
                    o[d] = t - x;
                }
            } else {
                for (int64_t d = 0; d < n; d++) {
                    const float d_own = rt[d] - rb[d];
                    const float t = (d_own - wo[d] * a) * n_t;
                    float x = ct[d] - cb[d];
                    x = x - cw[d] * c;
                    x = x * n_c;
                    tr[d] = t;
                    cr[d] = x;
                    o[d] = t - x;
                }
            }
            if (treated) {
                memcpy(treated + k * bc + d0, tr, n * sizeof(float));
                memcpy(ctrl + k * bc + d0, cr, n * sizeof(float));
            }
            if (!st)
                continue;
            const float unit = st->unit;
            if (st->agg_ptr) {
                for (int64_t e = st->agg_ptr[k]; e < st->agg_ptr[k + 1]; e++) {
                    const float at = st->coef_t[e], ac = st->coef_c[e], aw = st->coef_w[e];
                    float *yt = st->acc_t + st->agg_row[e] * st->acc_stride + d0;
                    float *yc = st->acc_c + st->agg_row[e] * st->acc_stride + d0;
                    float *yw = st->acc_w + st->agg_row[e] * st->acc_stride + d0;
                    for (int64_t d = 0; d < n; d++) {
                        const float t = tr[d] * unit, x = cr[d] * unit;
                        yt[d] = yt[d] + at * (t * t);
                        yc[d] = yc[d] + ac * x;
                        yw[d] = yw[d] + aw * o[d];
                    }
                }
            }
            if (!gm)
                continue;
            const float kt = st->k_t[k], kc = st->k_c[k], v = st->var[k];
            float *g = gm + d0;
            for (int64_t d = 0; d < n; d++) {
                const float t = tr[d] * unit, x = cr[d] * unit;
                float den = v - (t * t) * kt;
                den = den - (x * x) * kc;
                den = den < 0.0f ? 0.0f : den; /* rounding; NaN stays NaN, as np.maximum(den, 0) */
                const float y = o[d] * unit;
                float t2 = (y * y) / den;
                t2 = t2 != t2 ? 0.0f : t2; /* 0 / 0: a cell whose draw and spread are both nil */
                g[d] = t2 > g[d] ? t2 : g[d];
            }
        }
    }
}

/* Rademacher multipliers from raw random bytes (memtui.engine.did.multipliers): bit j of the stream, byte j / 8 and
   most significant bit first (np.unpackbits' order), is multiplier j, 2 * bit - 1, exactly as the numpy code makes
   them. Rows row0 .. row0 + n_rows - 1 of a (rows x bc) block, row-major (row i's draw d is bit i * bc + d), into out
   (n_rows x bc floats, contiguous); where wsum is not NULL, each draw's sum over those rows into wsum[d] (bc floats,
   overwritten): integers, exact in float32 below 2^24 rows, so equal to any order's sum. A chunk's multipliers are
   expanded group by group, each into a buffer its group's product reads while it is in cache, never as one rows x bc
   array (1 M rows x 128 draws: 0.5 GB a chunk). */
void rademacher_rows(const uint8_t *raw, int64_t bc, int64_t row0, int64_t n_rows, float *restrict out,
                     float *restrict wsum)
{
    if (bc % 8 == 0) { /* every row starts on a byte: its bytes in order, eight multipliers each */
        const int64_t bytes = n_rows * (bc / 8);
        const uint8_t *src = raw + row0 * (bc / 8);
        for (int64_t j = 0; j < bytes; j++) {
            const int b = src[j];
            float *o = out + 8 * j;
            for (int k = 0; k < 8; k++)
                o[k] = (float)(((b >> (7 - k)) & 1) * 2 - 1);
        }
    } else {
        for (int64_t i = 0; i < n_rows; i++) {
            const int64_t bit0 = (row0 + i) * bc;
            for (int64_t d = 0; d < bc; d++) {
                const int64_t bit = bit0 + d;
                out[i * bc + d] = (raw[bit >> 3] >> (7 - (bit & 7))) & 1 ? 1.0f : -1.0f;
            }
        }
    }
    if (!wsum)
        return;
    for (int64_t d = 0; d < bc; d++)
        wsum[d] = 0.0f;
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t d = 0; d < bc; d++)
            wsum[d] += out[i * bc + d];
}

/* The per-cohort sums of permutations of the cohort labels (memtui.engine.permutations): for each of n_perms
   permutations and each of n_groups cohorts, over the rows order[p], p in starts[g] .. starts[g + 1] - 1 (the rows the
   permutation gives cohort g), the sums of y, y^2 and the cross products y * (the previous column) in the columns
   before split[g] and y * y[base[g]] (the row's value at the cohort's base column) from split[g] on, column by column,
   into s, q and c (n_perms x n_groups x width, float32). y: the treated rows, width floats apart; its column 0 is zero
   (the lag of column 1 reads it). Each column's sums add the rows in the order of the slots. Where zbuf is not NULL,
   the rows of group ctrl_group (the permuted controls) are also written, as control_row makes them, in the order of
   their slots, into zbuf (n_perms x their number x gw) and their column means into zmean (n_perms x gw): what one
   BLAS product per permutation turns into their Gram matrix. Compiled for AVX2 as well
   where the compiler can (picked at load time); without contraction, as the rest of this file. perm_version: the
   arguments' version of perm_orders, perm_sums and perm_cells, which memtui.engine.permutations
   checks before calling them. */
int64_t perm_version(void) { return 7; }

/* splitmix64 (Steele, Lea & Flood 2014): the permutations' generator, one stream per permutation from its seed. */
static inline uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n), n < 2^32: Lemire's multiply-shift on the top 32 bits of a draw, rejecting the few
   low products that would bias it (exact). */
static inline uint64_t below(uint64_t *state, uint64_t n)
{
    const uint64_t threshold = (((uint64_t)1 << 32) - n) % n;
    for (;;) {
        const uint64_t product = (splitmix64(state) >> 32) * n;
        if ((product & 0xFFFFFFFFULL) >= threshold)
            return product >> 32;
    }
}

/* The permutations' slot lists (memtui.engine.permutations.orders): for permutation j, the keys 0 .. n_keys - 1 in a
   uniformly random order (Fisher-Yates, from the last position down, with the stream seeded by seeds[j], in work),
   the m-th treated row met in that order (row_of_key[k] < 0: no treated row has key k) mapped to the m-th in
   ascending order of the keys (by_key[m]): out[j * n_rows + that row] = by_key[m], the row whose slot it takes. */
void perm_orders(int64_t count, int64_t n_keys, const uint64_t *restrict seeds, const int64_t *restrict row_of_key,
                 const int64_t *restrict by_key, int64_t n_rows, int64_t *restrict work, int64_t *restrict out)
{
    for (int64_t j = 0; j < count; j++) {
        uint64_t state = seeds[j];
        for (int64_t k = 0; k < n_keys; k++)
            work[k] = k;
        for (int64_t i = n_keys - 1; i > 0; i--) {
            const int64_t other = (int64_t)below(&state, (uint64_t)i + 1), kept = work[i];
            work[i] = work[other];
            work[other] = kept;
        }
        int64_t *dst = out + j * n_rows, m = 0;
        for (int64_t k = 0; k < n_keys; k++) {
            const int64_t row = row_of_key[work[k]];
            if (row >= 0)
                dst[row] = by_key[m++];
        }
    }
}

#define PERM_AHEAD 4 /* rows ahead whose cache lines perm_sums prefetches */
#define PERM_CELLS 1024 /* cells perm_cells takes through every permutation of a chunk at once */
#define PERM_TILE 16 /* columns whose three sums perm_sums holds in registers over a block of rows */
#define PERM_PACK 16 /* rows of a block */
#define PERM_PACK_WIDTH 512 /* the widest rows perm_sums copies (wider: its scalar loop) */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define PERM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PERM_CLONES
#endif

#if defined(__GNUC__) || defined(__clang__)
typedef float lane8_t __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t mask8_t __attribute__((vector_size(8 * sizeof(float))));
#define LOAD8(dst, src) memcpy(&(dst), (src), sizeof(lane8_t)) /* unaligned */

/* Columns k0 .. k0 + PERM_TILE - 1 (two lanes of eight) of one cohort's sums over n packed rows (width floats
   apart), held in registers from and back to as, aq, ac: lane-wise the same operations in the same order as the
   scalar loop, so the same floats. */
static inline __attribute__((always_inline)) void
tile_sums(const float *restrict rows, int64_t n, int64_t width, int64_t b, int64_t sp, int64_t k0, float *as,
          float *aq, float *ac)
{
    mask8_t lag0, lag1; /* lanes before the split: the previous column, else the base */
    for (int i = 0; i < 8; i++) {
        lag0[i] = k0 + i < sp ? -1 : 0;
        lag1[i] = k0 + 8 + i < sp ? -1 : 0;
    }
    lane8_t s0, s1, q0, q1, c0, c1;
    LOAD8(s0, as + k0);
    LOAD8(s1, as + k0 + 8);
    LOAD8(q0, aq + k0);
    LOAD8(q1, aq + k0 + 8);
    LOAD8(c0, ac + k0);
    LOAD8(c1, ac + k0 + 8);
    for (int64_t p = 0; p < n; p++) {
        const float *restrict r = rows + p * width + k0;
        lane8_t v0, v1, l0, l1, yb;
        LOAD8(v0, r);
        LOAD8(v1, r + 8);
        LOAD8(l0, r - 1);
        LOAD8(l1, r + 7);
        for (int i = 0; i < 8; i++)
            yb[i] = r[b - k0];
        const lane8_t x0 = (lane8_t)(((mask8_t)l0 & lag0) | ((mask8_t)yb & ~lag0));
        const lane8_t x1 = (lane8_t)(((mask8_t)l1 & lag1) | ((mask8_t)yb & ~lag1));
        s0 = s0 + v0;
        s1 = s1 + v1;
        q0 = q0 + v0 * v0;
        q1 = q1 + v1 * v1;
        c0 = c0 + v0 * x0;
        c1 = c1 + v1 * x1;
    }
    memcpy(as + k0, &s0, sizeof s0);
    memcpy(as + k0 + 8, &s1, sizeof s1);
    memcpy(aq + k0, &q0, sizeof q0);
    memcpy(aq + k0 + 8, &q1, sizeof q1);
    memcpy(ac + k0, &c0, sizeof c0);
    memcpy(ac + k0 + 8, &c1, sizeof c1);
}
#define PERM_TILED 1
#else
#define PERM_TILED 0
#endif

/* One permuted control's row for their Gram matrix (memtui.engine.permutations.plan's rebased rows, as numpy makes
   them): its columns 0 .. gw - 1 less its first checkpoint (column 1), less centre (their mean over every row, in
   double), rounded to float, into z; each added, in double, into mean. */
static inline void control_row(const float *restrict r, int64_t gw, const double *restrict centre, float *restrict z,
                               double *restrict mean)
{
    for (int64_t k = 0; k < gw; k++) {
        const float d = r[k] - r[1];
        z[k] = (float)((double)d - centre[k]);
        mean[k] += (double)z[k];
    }
}

PERM_CLONES
void perm_sums(int64_t n_perms, int64_t n_rows, int64_t n_groups, int64_t width, const float *restrict y,
               const int64_t *restrict order, const int64_t *restrict starts, const int64_t *restrict base,
               const int64_t *restrict split, float *restrict s, float *restrict q, float *restrict c,
               int64_t ctrl_group, int64_t gw, const double *restrict centre, float *restrict zbuf,
               double *restrict zmean)
{
    /* the rows of a block are copied together (in L1, on few pages) and their sums taken tile by tile from there: the
       rows, in random order, are read once each, and each tile's three sums stay in registers over the block */
    float pack[PERM_PACK * PERM_PACK_WIDTH];
    const int64_t tiled = PERM_TILED && width <= PERM_PACK_WIDTH ? 1 + (width - 1) / PERM_TILE * PERM_TILE : 1;
    for (int64_t j = 0; j < n_perms; j++) {
        const int64_t *ord = order + j * n_rows;
        for (int64_t g = 0; g < n_groups; g++) {
            const int64_t b = base[g], sp = split[g], out = (j * n_groups + g) * width;
            float *restrict as = s + out, *restrict aq = q + out, *restrict ac = c + out;
            for (int64_t k = 1; k < width; k++)
                as[k] = aq[k] = ac[k] = 0.0f;
            if (g == ctrl_group && zbuf)
                for (int64_t k = 0; k < gw; k++)
                    zmean[j * gw + k] = 0.0;
            for (int64_t p0 = starts[g]; p0 < starts[g + 1]; p0 += PERM_PACK) {
                const int64_t p1 = p0 + PERM_PACK < starts[g + 1] ? p0 + PERM_PACK : starts[g + 1];
                for (int64_t p = p0; p < p1; p++) {
                    if (p + PERM_AHEAD < n_rows) { /* random order: ask for a later row's lines now */
                        const char *ahead = (const char *)(y + ord[p + PERM_AHEAD] * width);
                        for (int64_t byte = 0; byte < width * (int64_t)sizeof(float); byte += 64)
                            __builtin_prefetch(ahead + byte);
                    }
                    const float *restrict r = y + ord[p] * width;
                    if (tiled > 1)
                        memcpy(pack + (p - p0) * width, r, width * sizeof(float));
                    if (g == ctrl_group && zbuf) /* while the row is in cache: its row for the controls' Gram */
                        control_row(r, gw, centre, zbuf + (j * (starts[g + 1] - starts[g]) + p - starts[g]) * gw,
                                    zmean + j * gw);
                    if (tiled == width)
                        continue;
                    const float yb = r[b];
                    for (int64_t k = tiled; k < width; k++) {
                        const float v = r[k];
                        as[k] += v;
                        aq[k] += v * v;
                        ac[k] += v * (k < sp ? r[k - 1] : yb);
                    }
                }
#if PERM_TILED
                for (int64_t k0 = 1; k0 < tiled; k0 += PERM_TILE)
                    tile_sums(pack, p1 - p0, width, b, sp, k0, as, aq, ac);
#endif
            }
            if (g == ctrl_group && zbuf)
                for (int64_t k = 0; k < gw; k++)
                    zmean[j * gw + k] /= (double)(starts[g + 1] - starts[g]);
        }
    }
}

/* Per permutation j and cell k, from perm_sums' sums (in double): the cell's estimate dm - shift[k] (dm: the change
   of its cohort's mean from its base column col_b[k] to its column col_t[k]) into att[j * n_cells + k], and its
   squared studentised estimate estimate^2 / variance (variance: the cohort's centred changes' sum of squares over
   n^2, plus the controls' part; the cross term of the squares c[col_t], or none where cross[k] is 0)
   folded into the running maximum label_max[j * n_labels + label[k]] of the cell's class of families (label -1:
   none). A variance at or below floor2 (the squared standard-error floor) leaves the cell out. ctrl_group >= 0: the
   controls are permuted too (they are that group of the sums): the estimate is dm less the change of that group's
   mean (its sums over ctrl_n) less shift[k]; ctrl_group < 0: the controls are fixed, their change is in shift[k].
   The controls' part of the variance: fixed, ctrl_var[k]; permuted (gram not NULL), from permutation j's Gram matrix
   gram[j * gw * gw ...] of their rows (gw columns, the sums' coordinates) and their column means gmean[j * gw ...]:
   (G_tt + G_bb - 2 G_tb - ctrl_n (m_t - m_b)^2) / ctrl_n^2 (their centred changes' sum of squares, floored at 0). */
void perm_cells(int64_t n_perms, int64_t n_cells, int64_t n_groups, int64_t width, const float *restrict s,
                const float *restrict q, const float *restrict c,
                const int64_t *restrict cohort, const int64_t *restrict col_t, const int64_t *restrict col_b,
                const int64_t *restrict cross, const double *restrict n, const double *restrict shift,
                const double *restrict ctrl_var, const float *restrict gram, const double *restrict gmean, int64_t gw,
                double floor2, const int64_t *restrict label, int64_t n_labels, int64_t ctrl_group, double ctrl_n,
                float *restrict att, double *restrict label_max)
{
    /* cells in blocks, every permutation of the chunk over a block: the cells' constants are read from cache once
       per block, not once per permutation */
    for (int64_t k0 = 0; k0 < n_cells; k0 += PERM_CELLS) {
        const int64_t k1 = k0 + PERM_CELLS < n_cells ? k0 + PERM_CELLS : n_cells;
        for (int64_t j = 0; j < n_perms; j++) {
            double *lm = label_max + j * n_labels;
            const float *sj = s + j * n_groups * width, *qj = q + j * n_groups * width, *cj = c + j * n_groups * width;
            float *aj = att + j * n_cells;
            const float *gj = gram ? gram + j * gw * gw : 0;
            const double *mj = gram ? gmean + j * gw : 0;
            for (int64_t k = k0; k < k1; k++) {
                const int64_t row = cohort[k] * width, t = row + col_t[k], b = row + col_b[k];
                const double nk = n[k];
                const double dm = ((double)sj[t] - (double)sj[b]) / nk;
                const double cr = cross[k] ? (double)cj[t] : 0.0;
                double ss = (double)qj[t] + (double)qj[b] - 2.0 * cr - nk * dm * dm;
                ss = ss < 0.0 ? 0.0 : ss;
                double a = dm - shift[k];
                if (ctrl_group >= 0) {
                    const int64_t cg = ctrl_group * width;
                    a -= ((double)sj[cg + col_t[k]] - (double)sj[cg + col_b[k]]) / ctrl_n;
                }
                aj[k] = (float)a;
                if (label[k] < 0)
                    continue;
                double cv;
                if (gj) {
                    const int64_t ct = col_t[k], cb = col_b[k];
                    const double dmc = mj[ct] - mj[cb];
                    cv = (double)gj[ct * gw + ct] + (double)gj[cb * gw + cb] - 2.0 * (double)gj[cb * gw + ct];
                    cv -= ctrl_n * dmc * dmc;
                    cv = (cv < 0.0 ? 0.0 : cv) / (ctrl_n * ctrl_n);
                } else {
                    cv = ctrl_var[k];
                }
                const double var = ss / (nk * nk) + cv;
                if (!(var > floor2))
                    continue;
                const double t2 = a * a / var; /* squared: the maxima are compared, and rooted, by the caller */
                lm[label[k]] = t2 > lm[label[k]] ? t2 : lm[label[k]];
            }
        }
    }
}
