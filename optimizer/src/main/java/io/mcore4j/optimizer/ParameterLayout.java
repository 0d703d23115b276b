package io.mcore4j.optimizer;

import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ProcessGroups;

import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * Where each parameter sits in the checkpoint: its layout-independent key, global shape and the
 * global offsets of its local elements, as the model describes its own weights. The optimizer keys
 * its state for a parameter as {@code prefix + key + ".exp_avg"} (and {@code .exp_avg_sq},
 * {@code .fp32_param}, {@code .momentum_buffer}) with the same global shape and offsets, so
 * optimizer state saved under one parallel layout loads under another.
 */
@FunctionalInterface
public interface ParameterLayout {

    /**
     * The checkpoint placement of {@code param}: its local shape must have the parameter's number
     * of elements (a reshape such as a leading stacking dim of 1 is fine); a non-zero replica id
     * marks the parameter as held whole elsewhere too.
     *
     * @param param one of the optimizer's parameters
     * @return its placement, never null
     * @throws IllegalArgumentException if the parameter is unknown to this layout
     */
    ParameterPlacement describe(Parameter param);

    /**
     * Keys from a function; global shape and offsets from each parameter's {@link Parameter.Partition}
     * ({@link ParameterPlacement#of(String, Parameter)}). A strided parameter (a fused weight such as
     * SwiGLU's [gate; up], partition stride above 1) is placed as one rectangle per stride chunk,
     * under its plain key, so its state too loads at any tensor-parallel size.
     *
     * @param keyOf the layout-independent key of a parameter, e.g. {@code "decoder.layers.3.mlp.fc1.weight"}
     * @return the layout
     */
    static ParameterLayout byKey(Function<Parameter, String> keyOf) {
        return p -> ParameterPlacement.of(keyOf.apply(p), p);
    }

    /**
     * Descriptions given up front, e.g. collected from the model's {@code shardedState}: one
     * rectangle per parameter ({@link ParameterPlacement#of(ShardedTensor)}), so a strided
     * parameter, which a model describes as several pieces, needs {@link #byKey} instead.
     *
     * @param descriptions one per parameter (matched by identity)
     * @return the layout
     */
    static ParameterLayout of(Map<Parameter, ShardedTensor> descriptions) {
        Map<Parameter, ParameterPlacement> copy = new IdentityHashMap<>();
        descriptions.forEach((p, d) -> copy.put(p, ParameterPlacement.of(d)));
        return p -> {
            ParameterPlacement d = copy.get(p);
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
