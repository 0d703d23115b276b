package io.mcore4j.tensorparallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;

/**
 * The cuts between replicated, tensor-parallel and sequence-parallel regions, each applied as an
 * autograd {@link io.mcore4j.core.autograd.Function} through the caller's scope so that the
 * transposed collective runs in backward.
 *
 * <p>Activations are {@code [sequence, batch, hidden]}: "last dim" is the hidden (or vocabulary)
 * dim that tensor parallelism splits, "dim 0" the sequence dim that sequence parallelism splits.
 * Every method communicates over {@code tp} only, must be called by every member of the group in
 * the same order, and is a no-op that returns {@code x} itself when {@code tp.size() == 1}.
 * Results are owned by the scope's manager. Shapes that cannot be split evenly are refused with an
 * {@link IllegalArgumentException} naming the size and the tensor-parallel size.
 */
public final class Mappings {
    private Mappings() {}

    /**
     * Enters a tensor-parallel region: forward is the identity, backward all-reduces (sums) the
     * gradient, since every rank's partial gradient contributes to the replicated input.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x the replicated activation
     * @return {@code x}'s values, as a new autograd leaf when {@code x} requires grad
     */
    public static NDArray copyToTensorParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        return scope.apply1(new RegionFunctions.CopyToRegion(tp), x);
    }

    /**
     * Leaves a tensor-parallel region by summing the partial results: forward all-reduces, backward
     * is the identity.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x this rank's partial sum
     * @return the sum over the group, identical on every rank
     */
    public static NDArray reduceFromTensorParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        return scope.apply1(new RegionFunctions.ReduceFromRegion(tp), x);
    }

    /**
     * Keeps this rank's chunk of the last dim; backward all-gathers the gradient along the last dim.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x the replicated activation {@code [..., h]}
     * @return chunk {@code tp.rank()} of {@code [..., h / tp.size()]}
     * @throws IllegalArgumentException if {@code h} is not divisible by the tensor-parallel size
     */
    public static NDArray scatterToTensorParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkLastDim(x, tp);
        return scope.apply1(new RegionFunctions.Split(tp, -1, "scatter-to-tensor-parallel-region"), x);
    }

    /**
     * All-gathers along the last dim in rank order; backward keeps this rank's chunk of the gradient.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x this rank's chunk {@code [..., h / t]}
     * @return the full {@code [..., h]}
     */
    public static NDArray gatherFromTensorParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkRank(x);
        return scope.apply1(new RegionFunctions.Gather(tp, -1, false, "gather-from-tensor-parallel-region"), x);
    }

    /**
     * Keeps this rank's chunk of the sequence (dim 0); backward all-gathers the gradient along dim 0.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x the replicated activation {@code [s, ...]}
     * @return chunk {@code tp.rank()} of {@code [s / t, ...]}
     * @throws IllegalArgumentException if {@code s} is not divisible by the tensor-parallel size
     */
    public static NDArray scatterToSequenceParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkSequence(x, tp);
        return scope.apply1(new RegionFunctions.Split(tp, 0, "scatter-to-sequence-parallel-region"), x);
    }

    /**
     * All-gathers the sequence (dim 0) in rank order. Backward reduce-scatters the gradient along
     * dim 0 when {@code tensorParallelOutputGrad} (the gathered tensor feeds a tensor-parallel
     * computation whose ranks each produce a partial gradient, e.g. a column-parallel linear), and
     * otherwise keeps this rank's chunk (every rank already holds the whole gradient).
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x this rank's sequence chunk {@code [s / t, ...]}
     * @param tensorParallelOutputGrad whether the output's gradient is a partial sum per rank
     * @return the full {@code [s, ...]}
     */
    public static NDArray gatherFromSequenceParallelRegion(AutogradScope scope, Communicator tp, NDArray x,
                                                           boolean tensorParallelOutputGrad) {
        if (tp.size() == 1) {
            return x;
        }
        checkRank(x);
        return scope.apply1(new RegionFunctions.Gather(tp, 0, tensorParallelOutputGrad,
                "gather-from-sequence-parallel-region"), x);
    }

    /**
     * Sums the partial results over the group and keeps this rank's chunk of the sequence (dim 0);
     * backward all-gathers the gradient along dim 0.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x this rank's partial sum {@code [s, ...]}
     * @return chunk {@code tp.rank()} of the sum, {@code [s / t, ...]}
     * @throws IllegalArgumentException if {@code s} is not divisible by the tensor-parallel size
     */
    public static NDArray reduceScatterToSequenceParallelRegion(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkSequence(x, tp);
        return scope.apply1(new RegionFunctions.ReduceScatterFirstDim(tp), x);
    }

    /**
     * Moves from a sequence split to a hidden split with one all-to-all: rank {@code r} holding
     * sequence chunk {@code r} of {@code [s / t, ..., h]} ends with hidden chunk {@code r} of the
     * whole sequence, {@code [s, ..., h / t]} (Megatron-Core's {@code all_to_all_sp2hp}). Backward
     * is {@link #allToAllHiddenToSequence} of the gradient.
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x {@code [s / t, ..., h]}
     * @return {@code [s, ..., h / t]}
     * @throws IllegalArgumentException if {@code h} is not divisible by the tensor-parallel size
     */
    public static NDArray allToAllSequenceToHidden(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkLastDim(x, tp);
        return scope.apply1(new RegionFunctions.AllToAll(tp, true), x);
    }

    /**
     * The inverse of {@link #allToAllSequenceToHidden}: {@code [s, ..., h / t]} holding hidden chunk
     * {@code r} becomes sequence chunk {@code r} with the full hidden dim, {@code [s / t, ..., h]}
     * (Megatron-Core's {@code all_to_all_hp2sp}).
     *
     * @param scope the pass's scope
     * @param tp the tensor-parallel communicator
     * @param x {@code [s, ..., h / t]}
     * @return {@code [s / t, ..., h]}
     * @throws IllegalArgumentException if {@code s} is not divisible by the tensor-parallel size
     */
    public static NDArray allToAllHiddenToSequence(AutogradScope scope, Communicator tp, NDArray x) {
        if (tp.size() == 1) {
            return x;
        }
        checkSequence(x, tp);
        return scope.apply1(new RegionFunctions.AllToAll(tp, false), x);
    }

    /**
     * Refuses a sequence length (dim 0) that tensor parallelism cannot split evenly.
     *
     * @param sequenceLength the size of dim 0
     * @param tp the tensor-parallel communicator
     * @throws IllegalArgumentException naming both numbers
     */
    static void checkSequenceLength(long sequenceLength, Communicator tp) {
        if (sequenceLength % tp.size() != 0) {
            throw new IllegalArgumentException("sequence length " + sequenceLength
                    + " is not divisible by tensor parallel size " + tp.size()
                    + " (sequence parallelism splits dim 0)");
        }
    }

    private static void checkSequence(NDArray x, Communicator tp) {
        checkRank(x);
        checkSequenceLength(x.getShape().get(0), tp);
    }

    private static void checkLastDim(NDArray x, Communicator tp) {
        checkRank(x);
        Shape shape = x.getShape();
        long size = shape.get(shape.dimension() - 1);
        if (size % tp.size() != 0) {
            throw new IllegalArgumentException("last dim " + size + " of shape " + shape
                    + " is not divisible by tensor parallel size " + tp.size());
        }
    }

    private static void checkRank(NDArray x) {
        if (x.getShape().dimension() == 0) {
            throw new IllegalArgumentException("a scalar cannot be split or gathered across tensor-parallel ranks");
        }
    }
}
