package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Layouts beyond one chunk per rank, and what each rank reads: at TP2 and at PP2 no rank reads more
 * than its share of the checkpoint (plus the replicated norms, and the embedding or head it holds);
 * a rank holding two chunks (as with virtual pipeline stages), the last of them with a copy of the
 * tied embedding, gets both filled.
 */
class HfLayoutsTest {
    @Test
    void eachRankReadsOnlyItsShare() {
        for (ParallelDims dims : List.of(ParallelDims.of(2, 2, 1), ParallelDims.of(2, 1, 2))) {
            List<long[]> perRank = InJvmWorld.run(2, rank -> {
                ProcessGroups groups = rank.groups(dims);
                try (HfCheckpoint ck = HfCheckpoint.open(Fixtures.dir("mistral"))) {
                    TransformerConfig c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, dims.tensorParallel(),
                            DataType.FLOAT32);
                    ck.loadInto(List.of(Fixtures.build(c, groups, rank.manager())));
                    return new long[] {ck.bytesRead(), ck.tensorBytes()};
                }
            });
            long total = perRank.get(0)[1];
            long sum = 0;
            for (long[] r : perRank) {
                System.out.printf("%s: a rank read %d of %d bytes%n", dims, r[0], total);
                assertTrue(r[0] < 0.6 * total, dims + ": a rank read " + r[0] + " of " + total + " bytes");
                sum += r[0];
            }
            // together the ranks read everything once (TP2: the replicated norms twice)
            assertTrue(sum >= total && sum < 1.05 * total, dims + ": the ranks read " + sum + " of " + total + " bytes");
        }
    }

    @Test
    void twoChunksPerRankWithATiedEmbeddingCopy() {
        String name = "qwen2";
        int[] prompt = Fixtures.prompt(name);
        List<float[][]> perRank = InJvmWorld.run(2, rank -> {
            ProcessGroups groups = rank.groups(ParallelDims.of(2, 2, 1));
            NDManager m = rank.manager();
            try (HfCheckpoint ck = HfCheckpoint.open(Fixtures.dir(name))) {
                TransformerConfig c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, 2, DataType.FLOAT32);
                ModelContext ctx = ModelContext.create(c, groups, m, new SeedScheme(3));
                GptModel first = GptModel.build(ctx, LayerSpec.tensorParallel(), new int[] {0}, true, false);
                GptModel last = GptModel.build(ctx, LayerSpec.tensorParallel(), new int[] {1}, false, true);
                ck.loadInto(List.of(first, last));
                try (AutogradScope scope = AutogradScope.openNoGrad(m)) {
                    NDArray tokens = scope.manager().create(prompt, new Shape(prompt.length, 1)).toType(DataType.INT64, false);
                    NDArray hidden = first.forward(scope, tokens, null, null);
                    NDArray logits = groups.tp().allGather(last.forward(scope, null, hidden, null), 2, scope.manager());
                    float[] flat = logits.toFloatArray();
                    long padded = logits.getShape().get(2);
                    float[][] out = new float[prompt.length][ck.config().vocabSize()];
                    for (int i = 0; i < prompt.length; i++) {
                        System.arraycopy(flat, (int) (i * padded), out[i], 0, out[i].length);
                    }
                    return out;
                }
            }
        });
        double error = Fixtures.relativeError(perRank.get(0), Fixtures.referenceLogits(name));
        System.out.printf("%s as two chunks per rank at TP2: logits relative error %.3g%n", name, error);
        assertTrue(error <= 1e-4, "two chunks per rank: " + error);
        assertEquals(perRank.get(0).length, prompt.length);
    }
}
