package io.mcore4j.models.gpt;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.models.transformer.SdpaAttention;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.IntStream;

import org.junit.jupiter.api.Test;

/**
 * The forward pass frees what it no longer needs: without grad, what a layer leaves in the scope
 * does not grow with the number of layers; recompute with the fused attention (whose first run is
 * a no-grad scope) gives the gradients of the plain run.
 */
class ActivationReleaseTest {
    private static final int SEQ = 8;
    private static final int BATCH = 2;

    private static TransformerConfig.Builder base(int layers) {
        return TransformerConfig.builder(layers, 32, 4, 64).maxSequenceLength(SEQ).dropout(0, 0);
    }

    @Test
    void withoutGradTheScopeKeepsNothingPerLayer() {
        for (boolean sdpa : new boolean[] {false, true}) {
            for (int tp : new int[] {1, 2}) {
                int two = liveAfterForward(base(2).build(), tp, sdpa);
                int six = liveAfterForward(base(6).build(), tp, sdpa);
                assertEquals(two, six, (sdpa ? "fused" : "composed") + " attention at TP" + tp
                        + ": live arrays after a 2-layer and a 6-layer forward");
            }
        }
    }

    @Test
    void recomputeWithFusedAttentionGivesThePlainGradients() {
        for (int tp : new int[] {1, 2}) {
            float[] plain = gradients(base(2).build(), tp);
            for (TransformerConfig.Recompute mode : List.of(TransformerConfig.Recompute.SELECTIVE, TransformerConfig.Recompute.FULL)) {
                assertArrayEquals(plain, gradients(base(2).recompute(mode).build(), tp), 1e-6f, mode + " at TP" + tp);
            }
        }
    }

    /**
     * Arrays of more than one element left in a no-grad scope by one forward to the loss (the
     * composed attention's scale factor is a scalar that its scope keeps by design).
     */
    private static int liveAfterForward(TransformerConfig config, int tp, boolean sdpa) {
        List<Integer> perRank = InJvmWorld.run(tp, rank -> {
            GptModel model = build(config, rank.groups(ParallelDims.of(tp, tp, 1)), rank.manager(), sdpa);
            try (AutogradScope scope = AutogradScope.openNoGrad(rank.manager())) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 5, 1);
                int before = nonScalars(scope.manager());
                model.forward(scope, data[0], null, data[1]);
                return nonScalars(scope.manager()) - before;
            }
        });
        return perRank.get(0);
    }

    private static int nonScalars(NDManager m) {
        return (int) m.getManagedArrays().stream().filter(a -> a.getShape().size() > 1).count();
    }

    /** Rank 0's gradients of every parameter after one step with the fused attention, concatenated. */
    private static float[] gradients(TransformerConfig config, int tp) {
        return InJvmWorld.run(tp, rank -> {
            NDManager m = rank.manager();
            GptModel model = build(config, rank.groups(ParallelDims.of(tp, tp, 1)), m, true);
            List<Float> out = new ArrayList<>();
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray[] data = TokenBatches.shifted(scope.manager(), config.vocabSize(), SEQ, BATCH, 5, 1);
                scope.backward(model.forward(scope, data[0], null, data[1]));
                for (Parameter p : model.parameters()) {
                    for (float v : Tensors.gradientOrZeros(p.data(), scope.manager()).toFloatArray()) {
                        out.add(v);
                    }
                }
            }
            float[] flat = new float[out.size()];
            IntStream.range(0, flat.length).forEach(i -> flat[i] = out.get(i));
            return flat;
        }).get(0);
    }

    private static GptModel build(TransformerConfig config, ProcessGroups groups, NDManager m, boolean sdpa) {
        LayerSpec spec = sdpa ? LayerSpec.tensorParallel().withCoreAttention(SdpaAttention::forLayer) : LayerSpec.tensorParallel();
        int[] layers = IntStream.range(0, config.numLayers()).toArray();
        return GptModel.build(ModelContext.create(config, groups, m, new SeedScheme(42)), spec, layers, true, true);
    }
}
