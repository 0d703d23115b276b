package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertBitwiseEqual;
import static io.mcore4j.tensorparallel.Fixtures.solo;
import static org.junit.jupiter.api.Assertions.assertFalse;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;

/**
 * Reliability (issue 22, item 10): layers built without an explicit initializer get different
 * weights per layer (seeded from the layer's name and a base seed), the same weights at every
 * tensor-parallel size, and the same weights in every run.
 */
class DefaultInitReliabilityTest {

    @Test
    void defaultWeightsDifferPerLayerAndMatchAcrossTensorParallelSizes() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            Communicator one = solo(ctx);
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                // the example: a [16,64] row-parallel weight equalled a [64,16] column-parallel one reshaped
                RowParallelLinear row = RowParallelLinear.builder(64, 16, one).manager(m).build();
                ColumnParallelLinear column = ColumnParallelLinear.builder(16, 64, one).manager(m).build();
                assertFalse(Arrays.equals(row.weight().data().toFloatArray(), column.weight().data().toFloatArray()),
                        "default row and column weights must differ");

                ColumnParallelLinear fc1 = ColumnParallelLinear.builder(16, 64, one).name("mlp.linear_fc1").manager(m).build();
                ColumnParallelLinear qkv = ColumnParallelLinear.builder(16, 64, one).name("attention.linear_qkv").manager(m).build();
                assertFalse(Arrays.equals(fc1.weight().data().toFloatArray(), qkv.weight().data().toFloatArray()),
                        "two layers with different names must get different weights");
                ColumnParallelLinear reseeded = ColumnParallelLinear.builder(16, 64, one).name("mlp.linear_fc1").seed(7)
                        .manager(m).build();
                assertFalse(Arrays.equals(fc1.weight().data().toFloatArray(), reseeded.weight().data().toFloatArray()),
                        "another base seed must give other weights");

                // deterministic: the same name and seed give the same weight again
                ColumnParallelLinear again = ColumnParallelLinear.builder(16, 64, one).name("mlp.linear_fc1").manager(m).build();
                assertBitwiseEqual("same key, same weight", again.weight().data(), fc1.weight().data());

                // TP2 shards are slices of the TP1 weight
                ColumnParallelLinear fc1Tp2 = ColumnParallelLinear.builder(16, 64, tp).name("mlp.linear_fc1").manager(m).build();
                assertBitwiseEqual("column shard", fc1Tp2.weight().data(),
                        fc1.weight().data().get(r * 32 + ":" + (r * 32 + 32)).duplicate());
                RowParallelLinear rowTp2 = RowParallelLinear.builder(64, 16, tp).manager(m).build();
                assertBitwiseEqual("row shard", rowTp2.weight().data(),
                        row.weight().data().get(":, " + r * 32 + ":" + (r * 32 + 32)).duplicate());
                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(64, 16, one).manager(m).build();
                VocabParallelEmbedding embTp2 = VocabParallelEmbedding.builder(64, 16, tp).manager(m).build();
                assertBitwiseEqual("embedding shard", embTp2.weight().data(),
                        emb.weight().data().get(r * 32 + ":" + (r * 32 + 32)).duplicate());
                NDArray embWeight = emb.weight().data();
                assertFalse(Arrays.equals(embWeight.toFloatArray(), column.weight().data().toFloatArray()),
                        "the default embedding must differ from the default column weight of the same size");
                for (AutoCloseable layer : List.of(row, column, fc1, qkv, reseeded, again, fc1Tp2, rowTp2, emb, embTp2)) {
                    layer.close();
                }
            }
            return null;
        });
    }
}
