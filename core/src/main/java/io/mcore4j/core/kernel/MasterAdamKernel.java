package io.mcore4j.core.kernel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;

import java.util.List;
import java.util.Objects;

/**
 * Adam or AdamW on float32 master weights in one pass that reads each parameter's gradient where
 * it is and writes the updated weights straight into the model's parameters. The optimizer's
 * composed form makes four passes over the weights instead: widen the gradients into a float32
 * buffer, the update, and a copy per parameter back into the model (plus, for the norm, a pass over
 * the widened buffer). Found through {@link Kernels#find} where an implementation for the device is on the
 * class path (CUDA: {@code mcore4j-cuda}); callers keep the composed form otherwise, with the same
 * results to float32 rounding.
 *
 * <p>Launches are enqueued on the device's stream in program order with libtorch's own kernels
 * (the legacy default stream), so no synchronisation is needed around them.
 */
public interface MasterAdamKernel {

    /**
     * One parameter's range in a bucket's flat buffers.
     *
     * @param param the model tensor that receives the updated weights (rounded to its dtype),
     *     contiguous, of dtype float32, float16 or bfloat16; it must not move while bound
     * @param offset index of the parameter's first element in the flat master weights and moments
     * @param numel its number of elements
     */
    record Segment(NDArray param, long offset, long numel) {
        /**
         * @throws NullPointerException if {@code param} is null
         * @throws IllegalArgumentException if {@code offset} or {@code numel} is negative
         */
        public Segment {
            Objects.requireNonNull(param, "param");
            if (offset < 0 || numel < 0) {
                throw new IllegalArgumentException("segment offset " + offset + " and numel " + numel + " must be >= 0");
            }
        }
    }

    /**
     * A bucket: flat float32 master weights and moments of one length, and its parameters.
     *
     * @param master master weights, updated in place
     * @param expAvg first moments, updated in place
     * @param expAvgSq second moments, updated in place
     * @param segments the parameters' ranges, within the buffers' length
     * @param countsInNorm whether the gradients count in the norm (else they are only checked for inf/NaN)
     * @param decays whether the step's weight decay applies to the bucket
     */
    record Bucket(NDArray master, NDArray expAvg, NDArray expAvgSq, List<Segment> segments, boolean countsInNorm,
                  boolean decays) {
        /** @throws NullPointerException if a buffer is null */
        public Bucket {
            Objects.requireNonNull(master, "master");
            Objects.requireNonNull(expAvg, "expAvg");
            Objects.requireNonNull(expAvgSq, "expAvgSq");
            segments = List.copyOf(segments);
        }
    }

    /**
     * The hyperparameters of one step.
     *
     * @param lr learning rate
     * @param beta1 first-moment decay
     * @param beta2 second-moment decay
     * @param eps denominator term
     * @param weightDecay weight decay of the buckets that decay, >= 0
     * @param decoupled AdamW's decoupled weight decay instead of Adam's L2 term
     * @param step the step number, from 1 (bias corrections)
     * @param gradDivisor what every gradient is divided by first (loss scale over clipping coefficient), > 0
     */
    record Step(double lr, double beta1, double beta2, double eps, double weightDecay, boolean decoupled, long step,
                double gradDivisor) {
        /**
         * @throws IllegalArgumentException if {@code step < 1}, the weight decay is negative or the
         *     divisor is not positive and finite
         */
        public Step {
            if (step < 1) {
                throw new IllegalArgumentException("step " + step + " must be >= 1");
            }
            if (!(weightDecay >= 0)) {
                throw new IllegalArgumentException("weight decay " + weightDecay + " must be >= 0");
            }
            if (!(gradDivisor > 0) || Double.isInfinite(gradDivisor)) {
                throw new IllegalArgumentException("gradient divisor " + gradDivisor + " must be positive and finite");
            }
        }
    }

    /**
     * Binds the buffers and model tensors of an optimizer's buckets, which do not move for its life:
     * their addresses are read once here, so that a step only looks up its gradients.
     *
     * @param buckets the buckets
     * @return the bound buckets
     * @throws IllegalArgumentException if a buffer is not float32 of one length per bucket, a segment
     *     lies outside it, or a bucket mixes model dtypes
     */
    Bound bind(List<Bucket> buckets);

    /** An optimizer's buckets, bound to this kernel. */
    interface Bound {
        /**
         * Takes one step's gradients.
         *
         * @param grads per bucket, per segment, the gradient (any shape with the segment's number of
         *     elements, contiguous, float32, float16 or bfloat16, one dtype per bucket), or null where
         *     the parameter has none (read as zeros); they must stay unchanged until the step is done
         * @return the step's inputs
         * @throws IllegalArgumentException if the lists do not match the buckets, or a gradient its segment
         */
        Gradients gradients(List<List<NDArray>> grads);
    }

    /** One step's gradients, bound to the buckets. */
    interface Gradients {
        /**
         * The sum of the squares of every counted bucket's gradients, NaN or infinite if any
         * gradient of any bucket is not finite; summed in float64 in a fixed order (the same inputs
         * give the same bits).
         *
         * @param owner manager that owns the result
         * @return a 0-dim float64 tensor on the device
         */
        NDArray sumOfSquares(NDManager owner);

        /**
         * Updates every bucket's master weights and moments in place, and writes the new weights into
         * each segment's model tensor.
         *
         * @param step the hyperparameters
         */
        void step(Step step);
    }
}
