/* nanotron's Nanoset blending helper, compiled (memtui.orders.blend loads it with ctypes).

   ``build_nanoset_index_helper`` (nanotron, src/nanotron/data/nanoset.py, a numba loop): for sample i = 0 .. n-1,
   errors = weights * max(i, 1.0) - current (float64, current an int64 count converted exactly), the first argmax d is
   sample i's dataset, then current[d] += 1. This loop does the same float64 operations in the same order: one
   multiply, rounded, then one subtract, rounded. It must be built without contracting them into a fused
   multiply-add (-ffp-contract=off, which aarch64 compilers otherwise do by default) and without fast-math; numba
   (LLVM without fastmath) and numpy round each one. Ties go to the first maximum, as np.argmax. */

#include <stdint.h>

#define BLEND_ABI 1

int64_t blend_abi(void) { return BLEND_ABI; }

/* dataset_index of n samples over k datasets into out (uint8 when wide == 0, else uint16); counts: k int64, zeroed
   here, left holding each dataset's picks. */
void nanoset_blend(int64_t n, int64_t k, const double *weights, int64_t *counts, void *out, int wide) {
    uint8_t *out8 = (uint8_t *)out;
    uint16_t *out16 = (uint16_t *)out;
    for (int64_t d = 0; d < k; d++) counts[d] = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = i > 1 ? (double)i : 1.0; /* max(i, 1.0) */
        int64_t best = 0;
        double product = weights[0] * x;
        double top = product - (double)counts[0];
        for (int64_t d = 1; d < k; d++) {
            product = weights[d] * x;
            double e = product - (double)counts[d];
            if (e > top) { /* strictly greater: the first of equal maxima stays */
                top = e;
                best = d;
            }
        }
        if (wide) out16[i] = (uint16_t)best;
        else out8[i] = (uint8_t)best;
        counts[best] += 1;
    }
}

/* Each dataset's helper indices in order (nanotron's picks of dataset d: the j with dataset_index[j] == d, ascending),
   all datasets one after another in out (n uint32); cursor: k int64, each dataset's first place in out (advanced
   here). One pass, no temporary of the epoch's size. */
void nanoset_picks(int64_t n, const void *dataset, int wide, int64_t *cursor, uint32_t *out) {
    const uint8_t *d8 = (const uint8_t *)dataset;
    const uint16_t *d16 = (const uint16_t *)dataset;
    for (int64_t j = 0; j < n; j++) {
        int64_t d = wide ? d16[j] : d8[j];
        out[cursor[d]++] = (uint32_t)j;
    }
}
