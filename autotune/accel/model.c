/* Functional model of the simulated accelerator's GEMM instruction (autotune.accel).
 *
 * One instruction: C[i][j] += sum_k int32(A[i][k]) * int32(B[k][j]) for i, j, k < 16, with A and
 * B int8 tiles of the input and weight scratchpads and C an int32 tile of the accumulator.
 * Each operand comes as the address of its tile's first element and its element strides
 * along the tile's two dimensions (the calling convention of tensor_ir.intrinsics.ExternCImpl).
 *
 * The sum is taken in int32 with wrap-around, as the hardware's adder tree would: products of
 * int8 values fit in 15 bits, so a 16-term sum never overflows and the result equals numpy's
 * int32 matmul exactly.
 *
 * The model also counts the instructions it executes, so a test (or the runner) can compare
 * the count with the one the timing model derives from the program's loop nest.
 */
#include <stdint.h>

#define TILE 16

static volatile uint64_t gemm_calls = 0;

void simaccel_gemm_16x16x16(const int8_t *a, int64_t a_i, int64_t a_k,
                            const int8_t *b, int64_t b_k, int64_t b_j,
                            int32_t *c, int64_t c_i, int64_t c_j) {
    for (int i = 0; i < TILE; ++i) {
        for (int j = 0; j < TILE; ++j) {
            int32_t acc = 0;
            for (int k = 0; k < TILE; ++k)
                acc += (int32_t)a[i * a_i + k * a_k] * (int32_t)b[k * b_k + j * b_j];
            c[i * c_i + j * c_j] += acc;
        }
    }
    gemm_calls = gemm_calls + 1;
}

uint64_t simaccel_gemm_calls(void) { return gemm_calls; }

void simaccel_reset_gemm_calls(void) { gemm_calls = 0; }
