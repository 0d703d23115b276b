package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

/**
 * The float8 cast of an FP8 linear's operand in one read of it: {@code q = fp8(clamp(float(x)·scale, ±max))}
 * rounded to nearest even ({@code max} 448 for e4m3, 57344 for e5m2; a NaN stays a NaN of its sign, as libtorch's
 * conversion writes it), with the transposed copy the other GEMM's operand layout needs and the amax recorded in the
 * same pass: the fused form of the reference cast of {@code io.mcore4j.core.fp8.Fp8Kernels} (its TorchScript
 * module), which it equals bit for bit. The float8 outputs are allocated by the caller (DJL has no float8 dtype:
 * they are handles of DJL dtype {@code UNKNOWN}, one byte an element) and written here. Found through
 * {@link Kernels#find}; {@code Fp8Kernels} casts with the reference otherwise.
 */
public interface Fp8CastKernel {
    /**
     * Delayed scaling's cast: the scale and the running amax are the slot's, on the device.
     *
     * @param x {@code [rows, cols]} float32, float16 or bfloat16, contiguous, its dims multiples of 16 (an FP8
     *     linear's operands always are) and its data 16-byte aligned
     * @param q the float8 output {@code [rows, cols]} in the format {@code e5m2} names, contiguous
     * @param qT the float8 transposed output {@code [cols, rows]}, contiguous; null to write none
     * @param e5m2 whether to cast to e5m2 (else e4m3)
     * @param scale a one-element float32 tensor on {@code x}'s device, the scale to multiply by (a view into the
     *     scale buffer is fine: only its address is read)
     * @param amax a one-element float32 tensor on {@code x}'s device, the slot's running amax: set to
     *     {@code max(amax, max|x|)} (a NaN wins); null to record nothing
     * @return whether the kernel cast {@code x}; false, having written nothing, if it cannot take it (dtype, layout,
     *     dims)
     * @throws IllegalArgumentException if an output's shape does not fit {@code x}
     */
    boolean cast(NDArray x, NDArray q, NDArray qT, boolean e5m2, NDArray scale, NDArray amax);

    /**
     * Tensorwise (current) scaling's cast: the scale from {@code x}'s own amax, {@code max / amax} (1 where the
     * amax is 0 or not finite, the largest float32 where the quotient is infinite); records nothing.
     *
     * @param x {@code [rows, cols]}, as {@link #cast} takes it
     * @param q the float8 output {@code [rows, cols]}, contiguous
     * @param qT the float8 transposed output {@code [cols, rows]}, contiguous; null to write none
     * @param e5m2 whether to cast to e5m2 (else e4m3)
     * @param owner manager that owns the result
     * @return the 0-dim float32 {@code 1 / scale} on {@code x}'s device, 16-byte aligned (as a GEMM's scale operand
     *     must be); null, having written nothing, if the kernel cannot take {@code x}
     * @throws IllegalArgumentException as {@link #cast}
     */
    NDArray castCurrent(NDArray x, NDArray q, NDArray qT, boolean e5m2, NDManager owner);
}
