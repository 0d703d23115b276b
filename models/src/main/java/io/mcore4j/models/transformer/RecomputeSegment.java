package io.mcore4j.models.transformer;

import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.TransformerConfig.RecomputeMethod;

import java.util.ArrayList;
import java.util.List;

/**
 * A run of consecutive layers of a model chunk that the forward pass treats as one unit: either
 * checkpointed (only the run's input is kept; backward recomputes the whole run) or not. How full
 * recompute cuts a chunk into runs is Megatron-Core's: with {@link RecomputeMethod#UNIFORM} into
 * checkpointed runs of {@code recomputeNumLayers} layers (the last may be shorter), with
 * {@link RecomputeMethod#BLOCK} the first {@code recomputeNumLayers} layers each a checkpointed run
 * of one and the rest plain runs of one. Without full recompute every layer is a plain run.
 *
 * @param start index of the run's first layer within the chunk
 * @param end index after its last layer
 * @param recomputed whether the run is checkpointed
 */
public record RecomputeSegment(int start, int end, boolean recomputed) {

    /** Checks the bounds. */
    public RecomputeSegment {
        if (start < 0 || end <= start) {
            throw new IllegalArgumentException("a recompute segment [" + start + ", " + end + ") must hold a layer");
        }
    }

    /** @return layers in the run */
    public int size() {
        return end - start;
    }

    /**
     * @param layers a chunk's layers
     * @return one plain run per layer
     */
    public static List<RecomputeSegment> plain(int layers) {
        List<RecomputeSegment> out = new ArrayList<>();
        for (int i = 0; i < layers; i++) {
            out.add(new RecomputeSegment(i, i + 1, false));
        }
        return out;
    }

    /**
     * The runs of a model chunk.
     *
     * @param c the model (its recompute granularity, method and number of layers)
     * @param layers the chunk's layers
     * @return runs covering {@code [0, layers)} in order; empty for an empty chunk
     */
    public static List<RecomputeSegment> of(TransformerConfig c, int layers) {
        List<RecomputeSegment> out = new ArrayList<>();
        int n = c.recomputeNumLayers();
        boolean uniform = c.recompute() == Recompute.FULL && c.recomputeMethod() == RecomputeMethod.UNIFORM;
        boolean block = c.recompute() == Recompute.FULL && c.recomputeMethod() == RecomputeMethod.BLOCK;
        for (int i = 0; i < layers; ) {
            int end = uniform ? Math.min(i + n, layers) : i + 1;
            out.add(new RecomputeSegment(i, end, uniform || (block && i < n)));
            i = end;
        }
        return out;
    }
}
