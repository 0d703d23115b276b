package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;

import java.util.List;

/**
 * Fills a flat gradient bucket from the gradients where they lie, cast to the bucket's dtype and multiplied by the
 * mean's factor in the same pass: {@code bucket[offset + i] = dtype(float(source[i]) · scale)}, rounded once. The
 * data-parallel reduction's composed fill makes up to three passes over the bucket instead (the gradients concatenated
 * in their dtype, the concatenation cast into the bucket, the bucket multiplied in place). Found through
 * {@link Kernels#find} where an implementation for the device is on the class path (CUDA: {@code mcore4j-cuda});
 * callers compose the same values otherwise (libtorch multiplies a float32 bucket by the float32 reciprocal of a
 * host divisor, so the values are the same bits; a float32 source into a 2-byte bucket is rounded once here, twice
 * there).
 *
 * <p>Launches are enqueued on the current stream in program order with libtorch's own kernels.
 */
public interface BucketFillKernel {

    /**
     * One range of the bucket.
     *
     * @param source what goes there: contiguous, {@code numel} elements of float32, float16 or bfloat16 in any shape;
     *     null for zeros
     * @param dtype the source's dtype (the caller knows it; asking a bfloat16 tensor costs a native call); ignored
     *     without a source
     * @param offset index of the range's first element in the bucket
     * @param numel its number of elements
     */
    record Segment(NDArray source, DataType dtype, long offset, long numel) {
        /** @throws IllegalArgumentException if {@code offset} or {@code numel} is negative */
        public Segment {
            if (offset < 0 || numel < 0) {
                throw new IllegalArgumentException("segment offset " + offset + " and numel " + numel + " must be >= 0");
            }
        }
    }

    /**
     * Queues the fill.
     *
     * @param bucket the flat bucket, contiguous, float32, float16 or bfloat16
     * @param bucketDtype its dtype
     * @param segments the ranges to write, within the bucket; the rest of it is left as it is
     * @param scale what every source value is multiplied by, in float32 (1: a plain cast)
     * @throws IllegalArgumentException if a range lies outside the bucket, a source does not have its range's elements
     *     or is not contiguous, or a dtype is not one of the three
     * @throws NullPointerException if {@code bucket} or a segment is null
     */
    void fill(NDArray bucket, DataType bucketDtype, List<Segment> segments, float scale);
}
