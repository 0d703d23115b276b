package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertBitwiseEqual;
import static io.mcore4j.tensorparallel.Fixtures.solo;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;

import org.junit.jupiter.api.Test;

class InitializationTest {

    /**
     * Acceptance 3: every TP4 shard of a 16x16 column and row layer, a stride-2 column layer and a
     * 16x4 embedding equals the matching slice of the same layer built at TP1, bit for bit.
     */
    @Test
    void cpuInitShardsEqualTheSerialWeightsSliceBitwise() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            Communicator one = solo(ctx);
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                Initializer w = Initializers.normal(1.0, 42);
                Initializer b = Initializers.normal(1.0, 43);
                ColumnParallelLinear col = ColumnParallelLinear.builder(16, 16, tp).initializer(w).biasInitializer(b).manager(m).build();
                ColumnParallelLinear col1 = ColumnParallelLinear.builder(16, 16, one).initializer(w).biasInitializer(b).manager(m).build();
                assertBitwiseEqual("column weight", col.weight().data(), rows(col1.weight().data(), r * 4L, r * 4L + 4));
                assertBitwiseEqual("column bias", col.bias().data(), rows(col1.bias().data(), r * 4L, r * 4L + 4));

                RowParallelLinear row = RowParallelLinear.builder(16, 16, tp).initializer(w).biasInitializer(b).manager(m).build();
                RowParallelLinear row1 = RowParallelLinear.builder(16, 16, one).initializer(w).biasInitializer(b).manager(m).build();
                NDArray columns = row1.weight().data().get(":, " + r * 4 + ":" + (r * 4 + 4)).duplicate();
                assertBitwiseEqual("row weight", row.weight().data(), columns);
                assertBitwiseEqual("row bias (replicated)", row.bias().data(), row1.bias().data());

                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(16, 4, tp).initializer(w).manager(m).build();
                VocabParallelEmbedding emb1 = VocabParallelEmbedding.builder(16, 4, one).initializer(w).manager(m).build();
                assertBitwiseEqual("embedding rows", emb.weight().data(), rows(emb1.weight().data(), r * 4L, r * 4L + 4));

                // stride 2: a fused [gate; up] weight of 2 x 16 rows; rank r holds gate rows and up rows of chunk r
                ColumnParallelLinear glu = ColumnParallelLinear.builder(16, 32, tp).stride(2).initializer(w).biasInitializer(b)
                        .manager(m).build();
                ColumnParallelLinear glu1 = ColumnParallelLinear.builder(16, 32, one).stride(2).initializer(w).biasInitializer(b)
                        .manager(m).build();
                NDArray expected = NDArrays.concat(new NDList(rows(glu1.weight().data(), r * 4L, r * 4L + 4),
                        rows(glu1.weight().data(), 16 + r * 4L, 16 + r * 4L + 4)), 0);
                assertBitwiseEqual("strided weight", glu.weight().data(), expected);
                NDArray expectedBias = NDArrays.concat(new NDList(rows(glu1.bias().data(), r * 4L, r * 4L + 4),
                        rows(glu1.bias().data(), 16 + r * 4L, 16 + r * 4L + 4)), 0);
                assertBitwiseEqual("strided bias", glu.bias().data(), expectedBias);
                for (AutoCloseable layer : List.of(col, col1, row, row1, emb, emb1, glu, glu1)) {
                    layer.close();
                }
            }
            return null;
        });
    }

    @Test
    void shardedStateDescribesEachPieceAndMarksReplicatedBiasesOnRankZeroOnly() {
        InJvmWorld.run(4, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(4, 4, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear col = ColumnParallelLinear.builder(8, 16, tp).manager(m).build();
                List<ShardedTensor> c = col.shardedState("fc1.");
                assertEquals(List.of("fc1.weight", "fc1.bias"), c.stream().map(ShardedTensor::key).toList());
                assertArrayEquals(new long[] {16, 8}, c.get(0).globalShape());
                assertArrayEquals(new long[] {4L * r, 0}, c.get(0).globalOffset());
                assertArrayEquals(new long[] {4L * r}, c.get(1).globalOffset());
                assertTrue(c.stream().allMatch(ShardedTensor::isMainReplica));
                assertEquals(new Parameter.Partition(0, r, 4), col.weight().partition());

                RowParallelLinear row = RowParallelLinear.builder(16, 8, tp).sequenceParallel(true).manager(m).build();
                List<ShardedTensor> w = row.shardedState("fc2.");
                assertArrayEquals(new long[] {8, 16}, w.get(0).globalShape());
                assertArrayEquals(new long[] {0, 4L * r}, w.get(0).globalOffset());
                assertEquals(0, w.get(0).replicaId());
                assertEquals("fc2.bias", w.get(1).key());
                assertEquals(r, w.get(1).replicaId(), "replicated bias is main only on TP rank 0");
                assertEquals(Parameter.Partition.NONE, row.bias().partition());
                assertEquals(Parameter.Kind.SEQUENCE_PARALLEL, row.bias().kind());

                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(32, 4, tp).manager(m).build();
                ShardedTensor e = emb.shardedState("embedding.word_embeddings.").get(0);
                assertArrayEquals(new long[] {32, 4}, e.globalShape());
                assertArrayEquals(new long[] {8L * r, 0}, e.globalOffset());
                assertEquals(8L * r, emb.vocabStart());
                assertEquals(8L * r + 8, emb.vocabEnd());

                // stride 2 over 32 rows: two pieces per parameter, gate rows 4r.. and up rows 16 + 4r..
                ColumnParallelLinear glu = ColumnParallelLinear.builder(8, 32, tp).stride(2).manager(m).build();
                List<ShardedTensor> g = glu.shardedState("fc1.");
                assertEquals(4, g.size());
                assertEquals(List.of("fc1.weight", "fc1.weight", "fc1.bias", "fc1.bias"), g.stream().map(ShardedTensor::key).toList());
                assertArrayEquals(new long[] {4L * r, 0}, g.get(0).globalOffset());
                assertArrayEquals(new long[] {16 + 4L * r, 0}, g.get(1).globalOffset());
                assertArrayEquals(new long[] {32, 8}, g.get(1).globalShape());
                assertArrayEquals(new long[] {16 + 4L * r}, g.get(3).globalOffset());
                assertBitwiseEqual("second strided piece", g.get(1).data(), glu.weight().data().get("4:8"));
                int before = m.getManagedArrays().size();
                glu.shardedState("again.");
                assertEquals(before, m.getManagedArrays().size(), "describing strided pieces again allocates nothing");
                for (AutoCloseable layer : List.of(col, row, emb, glu)) {
                    layer.close();
                }
            }
            return null;
        });
    }

    @Test
    void perRankDeviceInitDrawsOnlyTheShardDeterministicallyAndDiffersAcrossRanks() {
        List<float[]> shards = InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                Initializer init = Initializers.normalPerRank(0.5, 7);
                ColumnParallelLinear a = ColumnParallelLinear.builder(64, 128, tp).initializer(init).manager(m).build();
                ColumnParallelLinear b = ColumnParallelLinear.builder(64, 128, tp).initializer(init).manager(m).build();
                assertEquals(new Shape(64, 64), a.weight().data().getShape());
                assertBitwiseEqual("same seed, same rank", a.weight().data(), b.weight().data());
                float[] v = a.weight().data().toFloatArray();
                a.close();
                b.close();
                return v;
            }
        });
        assertFalse(Arrays.equals(shards.get(0), shards.get(1)), "ranks must draw different shards");
        for (float[] v : shards) {
            double sum = 0;
            double sq = 0;
            for (float x : v) {
                sum += x;
                sq += x * x;
            }
            double mean = sum / v.length;
            double std = Math.sqrt(sq / v.length - mean * mean);
            assertEquals(0, mean, 0.03, "mean of 4096 samples");
            assertEquals(0.5, std, 0.025, "std of 4096 samples");
        }
    }

    @Test
    void stridedSliceOfAFullWeightAndTheDefaultInitializerAgree() {
        try (NDManager m = NDManager.newBaseManager()) {
            NDArray full = m.arange(0f, 24f).reshape(8, 3);
            StridedPartition p = new StridedPartition(0, 1, 2, 2);
            assertEquals(new Shape(4, 3), p.localShape(full.getShape()));
            // chunks of 2 rows: 0 1 | 2 3 | 4 5 | 6 7; part 1 of 2 with stride 2 holds chunks 1 and 3
            assertArrayEquals(new float[] {6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}, p.slice(full, m).toFloatArray());
            NDArray viaInit = ((Initializer) (mm, s, d) -> mm.arange(0f, 24f).reshape(s)).createShard(m, new Shape(8, 3),
                    DataType.FLOAT32, p);
            assertBitwiseEqual("default createShard", viaInit, p.slice(full, m));
        }
    }

    private static NDArray rows(NDArray full, long from, long to) {
        return full.get(from + ":" + to).duplicate();
    }
}
