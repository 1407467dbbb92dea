/* Fused loops of the bootstrap's cell draws and of the calibrated band's studentised maxima (memtui.engine.kernels).

   The numpy code in did.py (_Stack.cell_draws) and bands.py (studentized_bootstrap) makes about thirty passes over a
   block of cells x draws, each an array of its own; these loops make the same float32 operations element by element,
   in the same order, in one pass: each operation is IEEE-rounded as numpy rounds it, so the results are the numpy
   code's bit for bit. That holds only without contraction of a multiply and an add into one fused operation and
   without fast-math: setup.py compiles this file with -ffp-contract=off. Plain C, no Python API: loaded with ctypes,
   which releases the GIL for the call. */

#include <stdint.h>

/* One block of cells of one layout: its draws into out (rows out_stride apart: a view into the draws of every
   chunk) and the cohort's and the control set's parts into treated and ctrl (cells x bc), as _Stack.cell_draws.
   r: each group's multiplier-weighted sums (rows x bc); cum_r, w, cum_w: their prefix sums, the groups' multiplier
   sums and their prefix sums. The index arrays give the cells' rows in them (col added to those of r and cum_r: the
   layout's columns in its stack). any_own: whether some cell of the block has its own cohort in its control set
   (the numpy code only then subtracts own * x, and 0 * x is then subtracted from the other cells too). */
void cell_draws(int64_t n_cells, int64_t bc, const float *r, const float *cum_r, const float *w, const float *cum_w,
                const int64_t *own_t, const int64_t *own_b, const int64_t *ctrl_t, const int64_t *ctrl_b,
                int64_t col, const int64_t *group, const int64_t *prefix, const uint8_t *own, int any_own,
                const float *inv_nt, const float *inv_nc, const float *dm, const float *dmu, float *out,
                int64_t out_stride, float *treated, float *ctrl)
{
    for (int64_t k = 0; k < n_cells; k++) {
        const float *wo = w + group[k] * bc, *cw = cum_w + prefix[k] * bc;
        const float *rt = r + (own_t[k] + col) * bc, *rb = r + (own_b[k] + col) * bc;
        const float *ct = cum_r + (ctrl_t[k] + col) * bc, *cb = cum_r + (ctrl_b[k] + col) * bc;
        const float is_own = own[k] ? 1.0f : 0.0f, a = dm[k], n_t = inv_nt[k], c = dmu[k], n_c = inv_nc[k];
        float *o = out + k * out_stride, *tr = treated + k * bc, *cr = ctrl + k * bc;
        if (any_own) {
            for (int64_t d = 0; d < bc; d++) {
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
            for (int64_t d = 0; d < bc; d++) {
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
    }
}

/* One block of cells: the studentised squares D*^2 / max(var - k_t T*^2 - k_c C*^2, 0) (0 / 0 taken as 0) in units
   of the outcome's sd (unit = 1 / sd), each cell's folded into the running maximum of its group of cells (row
   label[k] of group_max, rows gm_stride apart; -1: a cell in no mask), as bands.studentized_bootstrap. With sq_t,
   the unit-scaled T*^2 and C* go there too (the aggregates' re-centring). treated and ctrl are read only. */
void studentise(int64_t n_cells, int64_t bc, const float *treated, const float *ctrl, const float *out,
                int64_t out_stride, float unit, const float *k_t, const float *k_c, const float *var,
                const int64_t *label, float *group_max, int64_t gm_stride, float *sq_t, float *sq_c)
{
    for (int64_t k = 0; k < n_cells; k++) {
        const float *tr = treated + k * bc, *cr = ctrl + k * bc, *o = out + k * out_stride;
        const float kt = k_t[k], kc = k_c[k], v = var[k];
        float *gm = label[k] >= 0 ? group_max + label[k] * gm_stride : 0;
        if (sq_t) {
            float *st = sq_t + k * bc, *sc = sq_c + k * bc;
            for (int64_t d = 0; d < bc; d++) {
                const float t = tr[d] * unit, c = cr[d] * unit;
                st[d] = t * t;
                sc[d] = c;
            }
        }
        if (!gm)
            continue;
        for (int64_t d = 0; d < bc; d++) {
            const float t = tr[d] * unit, c = cr[d] * unit;
            float den = v - (t * t) * kt;
            den = den - (c * c) * kc;
            den = den < 0.0f ? 0.0f : den; /* rounding; NaN stays NaN, as np.maximum(den, 0) */
            const float x = o[d] * unit;
            float t2 = (x * x) / den;
            t2 = t2 != t2 ? 0.0f : t2; /* 0 / 0: a cell whose draw and spread are both nil */
            gm[d] = t2 > gm[d] ? t2 : gm[d];
        }
    }
}
