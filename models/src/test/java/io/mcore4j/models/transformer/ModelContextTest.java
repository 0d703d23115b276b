package io.mcore4j.models.transformer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Dropout regions at TP2 x DP2 (4 ranks, rank = tp + 2 dp): masks inside the tensor-parallel region
 * differ across TP ranks and agree across DP ranks; masks on replicated activations agree across both.
 */
class ModelContextTest {

    @Test
    void dropoutRegionsVaryOverTheRightAxes() {
        TransformerConfig config = TransformerConfig.builder(2, 16, 4, 64).build();
        List<float[][]> masks = InJvmWorld.run(4, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(4, 2, 1));
            ModelContext ctx = ModelContext.create(config, groups, rank.manager(), new SeedScheme(9));
            float[] attention = ctx.attentionDropout().keepMask(rank.manager(), new Shape(256), 0.5, DataType.FLOAT32).toFloatArray();
            float[] hidden = ctx.hiddenDropout().keepMask(rank.manager(), new Shape(256), 0.5, DataType.FLOAT32).toFloatArray();
            return new float[][] {attention, hidden};
        });
        // TP ranks 0 and 1 of DP replica 0 are ranks 0 and 1; DP replica 1 holds ranks 2 and 3
        assertFalse(Arrays.equals(masks.get(0)[0], masks.get(1)[0]), "attention dropout must differ across TP ranks");
        assertArrayEquals(masks.get(0)[0], masks.get(2)[0], "attention dropout must agree across DP ranks");
        assertArrayEquals(masks.get(1)[0], masks.get(3)[0]);
        for (int r = 1; r < 4; r++) {
            assertArrayEquals(masks.get(0)[1], masks.get(r)[1], "replicated hidden-state dropout must agree on rank " + r);
        }
    }
}
