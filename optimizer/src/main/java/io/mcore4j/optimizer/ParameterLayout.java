package io.mcore4j.optimizer;

import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ProcessGroups;

import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * Where each parameter sits in the checkpoint: its layout-independent key, global shape and
 * offset, as the model describes its own weights. The optimizer keys its state for a parameter as
 * {@code prefix + key + ".exp_avg"} (and {@code .exp_avg_sq}, {@code .fp32_param},
 * {@code .momentum_buffer}) with the same global shape and offsets, so optimizer state saved under one
 * parallel layout loads under another.
 */
@FunctionalInterface
public interface ParameterLayout {

    /**
     * The checkpoint description of {@code param}: its data must have the parameter's number of
     * elements (a reshape such as a leading stacking dim of 1 is fine); a non-zero replica id marks
     * the parameter as held whole elsewhere too.
     *
     * @param param one of the optimizer's parameters
     * @return its description, never null
     * @throws IllegalArgumentException if the parameter is unknown to this layout
     */
    ShardedTensor describe(Parameter param);

    /**
     * Keys from a function; global shape and offsets from each parameter's {@link Parameter.Partition}.
     *
     * <p>A strided parameter (a fused weight such as SwiGLU's [gate; up], partition stride above 1)
     * holds several global row ranges, which a single rectangle cannot describe; its state is keyed
     * with the tensor-parallel size ({@code key + "@tp" + size}), so it resumes at that size and a
     * resume at another size fails on the missing key instead of mixing up rows.
     *
     * @param keyOf the layout-independent key of a parameter, e.g. {@code "decoder.layers.3.mlp.fc1.weight"}
     * @return the layout
     */
    static ParameterLayout byKey(Function<Parameter, String> keyOf) {
        return p -> {
            ShardedTensor own = p.sharded("", 0);
            Parameter.Partition partition = p.partition();
            String key = keyOf.apply(p) + (partition.stride() > 1 ? "@tp" + partition.count() : "");
            return new ShardedTensor(key, own.data(), own.globalShape(), own.globalOffset(), 0);
        };
    }

    /**
     * Descriptions given up front, e.g. collected from the model's {@code shardedState}.
     *
     * @param descriptions one per parameter (matched by identity)
     * @return the layout
     */
    static ParameterLayout of(Map<Parameter, ShardedTensor> descriptions) {
        Map<Parameter, ShardedTensor> copy = new IdentityHashMap<>(descriptions);
        return p -> {
            ShardedTensor d = copy.get(p);
            if (d == null) {
                throw new IllegalArgumentException("no checkpoint description for parameter " + p);
            }
            return d;
        };
    }

    /**
     * Keys {@code "stage<pp>.param<i>.<name>"} by pipeline stage and position in {@code params}
     * ({@code "stage<pp>.ep<e>.param<i>.<name>"} for expert parameters, which differ between
     * expert-parallel ranks). These keys change when the model's parameter list or the parallel
     * layout does: use it only to resume under the same layout.
     *
     * @param params the parameter list that defines the positions
     * @param groups this rank's groups (pipeline stage, expert-parallel rank)
     * @return the layout
     */
    static ParameterLayout byPosition(List<Parameter> params, ProcessGroups groups) {
        Map<Parameter, Integer> index = new IdentityHashMap<>();
        for (int i = 0; i < params.size(); i++) {
            index.put(params.get(i), i);
        }
        String stage = "stage" + groups.pipelineRank() + ".";
        String expert = stage + "ep" + groups.ep().rank() + ".";
        return byKey(p -> {
            Integer i = index.get(p);
            if (i == null) {
                throw new IllegalArgumentException("parameter " + p + " is not in the list that defines the positions");
            }
            return (p.kind() == Parameter.Kind.EXPERT ? expert : stage) + "param" + i + "." + p.name();
        });
    }
}
