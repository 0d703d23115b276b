package io.mcore4j.optimizer;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

/**
 * The global L2 norm of the gradients of a model spread over tensor, pipeline, expert and data
 * parallel ranks, counting every distinct gradient element exactly once, and clipping by it.
 *
 * <p>Counting rule for a parameter held by this rank: a weight replicated over tensor-parallel
 * ranks ({@link Parameter.Partition#NONE}) counts only on tensor-parallel rank 0 (expert-tensor-parallel
 * rank 0 for experts); a tied embedding counts only on the first pipeline stage; when the
 * gradients are data-parallel replicas (after an all-reduce) they count only on data-parallel rank
 * 0 of their reduction group (dp-cp, or expert-dp for experts). Sums of squares are then added
 * over the world group, which makes the result bitwise identical on every rank and covers experts
 * held by other expert-parallel ranks. Every rank of the world must call these methods together.
 */
public final class GradientNorm {
    /** Added to the norm before dividing, as torch and Megatron do. */
    static final double CLIP_EPSILON = 1e-6;

    private GradientNorm() {}

    /**
     * The global norm of the parameters' {@code .grad} (already synchronised over data-parallel
     * ranks), with no tied embedding.
     *
     * @param params this rank's parameters
     * @param groups this rank's groups
     * @param manager manager for temporaries (released before returning)
     * @return the norm, identical on every rank; inf or NaN if a gradient holds one
     */
    public static double global(List<Parameter> params, ProcessGroups groups, NDManager manager) {
        return global(params, List.of(), groups, manager);
    }

    /**
     * The global norm of the parameters' {@code .grad} (already synchronised over data-parallel ranks).
     *
     * @param params this rank's parameters
     * @param sharedEmbedding the parameters among {@code params} tied across the first and last stage
     * @param groups this rank's groups
     * @param manager manager for temporaries (released before returning)
     * @return the norm, identical on every rank
     */
    public static double global(List<Parameter> params, Collection<Parameter> sharedEmbedding, ProcessGroups groups,
                                NDManager manager) {
        Set<Parameter> shared = identitySet(sharedEmbedding);
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            List<NDArray> squares = new ArrayList<>();
            for (Parameter p : params) {
                if (!counts(p, shared.contains(p), true, groups)) {
                    continue;
                }
                NDArray g = p.gradient(temp);
                if (g != null) {
                    squares.add(squares(g, temp));
                }
            }
            return Math.sqrt(sumOverWorld(List.of(squares), groups, temp)[0]);
        }
    }

    /**
     * Scales every {@code .grad} in place by {@code maxNorm / (totalNorm + 1e-6)} when that is below 1.
     *
     * @param params the parameters whose gradients are clipped
     * @param maxNorm the largest norm allowed, > 0
     * @param totalNorm the global norm from {@link #global}
     * @param manager manager for temporaries
     * @return the factor applied (1 when no clipping was needed)
     */
    public static double clip(List<Parameter> params, double maxNorm, double totalNorm, NDManager manager) {
        if (!(maxNorm > 0)) {
            throw new IllegalArgumentException("maximum norm " + maxNorm + " must be > 0");
        }
        double coefficient = clipCoefficient(maxNorm, totalNorm);
        if (coefficient < 1) {
            try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
                for (Parameter p : params) {
                    NDArray g = p.gradient(temp);
                    if (g != null) {
                        g.muli(coefficient);
                    }
                }
            }
        }
        return Math.min(coefficient, 1);
    }

    /** {@code maxNorm / (totalNorm + eps)}; clip only when below 1. */
    static double clipCoefficient(double maxNorm, double totalNorm) {
        return maxNorm / (totalNorm + CLIP_EPSILON);
    }

    /**
     * Whether this rank's copy of {@code p}'s gradient counts in the global norm (see the class
     * comment). This is the one definition of the rule: the optimizer, its buckets and its
     * checkpoint replica ids all ask it.
     *
     * @param p a parameter of this rank
     * @param sharedEmbedding whether it is tied across the first and last stage
     * @param dataParallelReplica whether its gradient is identical on every rank of its reduction group
     * @param groups this rank's groups
     * @return true if it counts here
     */
    static boolean counts(Parameter p, boolean sharedEmbedding, boolean dataParallelReplica, ProcessGroups groups) {
        if (!countsOnModelParallelRank(p, sharedEmbedding, groups)) {
            return false;
        }
        boolean expert = p.kind() == Parameter.Kind.EXPERT;
        return !dataParallelReplica || (expert ? groups.expertDp() : groups.dpCp()).rank() == 0;
    }

    /**
     * The part of {@link #counts} that ignores data-parallel replicas: whether this rank's copy
     * counts among the tensor-parallel ranks and pipeline stages that hold {@code p}. It is the
     * same on every rank of {@code p}'s reduction group (dp-cp, or expert-dp for experts), whose
     * members differ only in their data-parallel coordinate. {@link #counts} adds only a condition
     * on the data-parallel rank, which holds for all of this rank's parameters of one reduction
     * group or for none of them.
     *
     * @param p a parameter of this rank
     * @param sharedEmbedding whether it is tied across the first and last stage
     * @param groups this rank's groups
     * @return true if it counts on this tensor-parallel rank and pipeline stage
     */
    static boolean countsOnModelParallelRank(Parameter p, boolean sharedEmbedding, ProcessGroups groups) {
        boolean expert = p.kind() == Parameter.Kind.EXPERT;
        if (!p.partition().isSplit() && (expert ? groups.expertTp() : groups.tp()).rank() != 0) {
            return false;
        }
        return !sharedEmbedding || groups.isFirstStage();
    }

    /**
     * Sums per-rank statistics over the world group in float64 and reads them with one device-to-host copy: each
     * statistic's scalar tensors are added on the device ({@link #sumOnDevice}), the statistics stacked and
     * all-reduced there. (Reading each rank's sums first and writing them back for the all-reduce left the device idle
     * for two host round trips at every optimizer step.)
     *
     * @param statistics per statistic, this rank's scalar tensors of any numeric dtype, all on one device (a statistic
     *                   with none is 0)
     * @param groups this rank's groups
     * @param temp manager for the tensors (its device is used when no statistic has a tensor)
     * @return the sums, identical on every rank
     */
    static double[] sumOverWorld(List<List<NDArray>> statistics, ProcessGroups groups, NDManager temp) {
        Device device = statistics.stream().flatMap(List::stream).map(NDArray::getDevice).findFirst()
                .orElse(temp.getDevice());
        NDList sums = new NDList();
        for (List<NDArray> scalars : statistics) {
            sums.add(scalars.isEmpty() ? Tensors.own(temp.zeros(new Shape(), DataType.FLOAT64, device), temp)
                    : sumOnDevice(scalars, temp));
        }
        NDArray stacked = Tensors.own(NDArrays.stack(sums), temp);
        if (groups.world().size() > 1) {
            stacked = groups.world().allReduce(stacked, ReduceOp.SUM, temp);
        }
        return stacked.toDoubleArray();
    }

    /** Sum of squares of {@code g}'s elements as a scalar tensor, accumulated in float32 (float16 gradients are widened first). */
    private static NDArray squares(NDArray g, NDManager temp) {
        NDArray flat = Tensors.own(g.reshape(-1), temp);
        if (flat.getDataType() != DataType.FLOAT32) {
            flat = Tensors.own(flat.toType(DataType.FLOAT32, false), temp);
        }
        return Tensors.own(flat.dot(flat), temp);
    }

    /**
     * Adds scalar tensors in float64 on their device. Scalars of one dtype are stacked first and widened in one cast
     * (the optimizer's case: one per shard); widening is exact, so the float64 sum sees the same values as with a cast
     * per scalar.
     *
     * @param scalars scalar tensors of any numeric dtype, at least one
     * @param temp manager for the result and temporaries
     * @return their sum, a 0-dim float64 tensor
     */
    static NDArray sumOnDevice(List<NDArray> scalars, NDManager temp) {
        DataType dtype = scalars.get(0).getDataType();
        boolean uniform = true;
        for (NDArray s : scalars) {
            uniform &= s.getDataType() == dtype;
        }
        NDArray wide;
        if (uniform) {
            wide = Tensors.own(NDArrays.stack(new NDList(scalars)), temp);
            if (dtype != DataType.FLOAT64) {
                wide = Tensors.own(wide.toType(DataType.FLOAT64, false), temp);
            }
        } else {
            NDList widened = new NDList();
            for (NDArray s : scalars) {
                widened.add(Tensors.own(s.toType(DataType.FLOAT64, false), temp));
            }
            wide = Tensors.own(NDArrays.stack(widened), temp);
        }
        return Tensors.own(wide.sum(), temp);
    }

    private static Set<Parameter> identitySet(Collection<Parameter> params) {
        Set<Parameter> set = Collections.newSetFromMap(new IdentityHashMap<>());
        set.addAll(params);
        return set;
    }
}
