package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.leaf;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.api.Test;

/** The less common options: gathered output, skipped bias add, a replicated row input, a foreign weight. */
class LinearOptionsTest {
    static final Initializer W = Initializers.normal(0.5, 301);
    static final Initializer B = Initializers.normal(0.5, 302);

    @Test
    void gatheredOutputSkippedBiasAndScatteredRowInputMatchSerial() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear col = ColumnParallelLinear.builder(6, 8, tp).gatherOutput(true).skipBiasAdd(true)
                        .initializer(W).biasInitializer(B).manager(m).build();
                RowParallelLinear row = RowParallelLinear.builder(8, 6, tp).inputIsParallel(false).skipBiasAdd(true)
                        .initializer(W).biasInitializer(B).manager(m).build();
                NDArray w1 = W.create(m, new Shape(8, 6), DataType.FLOAT32);
                NDArray w2 = W.create(m, new Shape(6, 8), DataType.FLOAT32);
                NDArray xFull = Initializers.normal(1, 303).create(m, new Shape(4, 1, 6), DataType.FLOAT32);
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    NDArray x = leaf(xFull, s);
                    LinearOutput a = col.forward(scope, x);
                    assertEquals(new Shape(4, 1, 8), a.output().getShape());
                    assertSame(col.bias().data(), a.bias());
                    NDArray serialA = JniUtils.linear((PtNDArray) xFull, (PtNDArray) w1, null);
                    assertClose("gathered column output without bias", a.output(), serialA, 1e-5);

                    LinearOutput b = row.forward(scope, a.output());
                    assertSame(row.bias().data(), b.bias());
                    NDArray serialB = JniUtils.linear((PtNDArray) serialA, (PtNDArray) w2, null);
                    assertClose("row output from a replicated input, without bias", b.output(), serialB, 1e-5);

                    scope.backward(b.output().sum());
                    // d sum(x W1ᵀ W2ᵀ) / dx = 1 · W2 W1, the same on every rank
                    NDArray dx = m.ones(new Shape(4, 1, 6)).matMul(w2.matMul(w1));
                    assertClose("rank " + r + " input gradient", grad(x, s), dx, 1e-5);
                }
                col.close();
                row.close();
            }
            return null;
        });
    }

    @Test
    void aForeignWeightMustHaveTheShardShapeAndCollectsTheGradient() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(8, 4, tp).manager(m).build();
                ColumnParallelLinear out = ColumnParallelLinear.builder(4, 8, tp).bias(false).skipWeightAllocation(true)
                        .manager(m).build();
                ColumnParallelLinear wrong = ColumnParallelLinear.builder(4, 16, tp).bias(false).manager(m).build();
                assertNull(out.weight());
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray h = leaf(scope.manager().ones(new Shape(2, 1, 4)), scope.manager());
                    assertThrows(IllegalStateException.class, () -> out.forward(scope, h));
                    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                            () -> out.forward(scope, h, wrong.weight()));
                    assertEquals(true, e.getMessage().contains("(8, 4)") && e.getMessage().contains("(4, 4)"), e.getMessage());
                    NDArray logits = out.forward(scope, h, emb.weight()).output();
                    scope.backward(logits.sum());
                    // d sum(h Eᵀ) / dE = column sums of h: 2 for every element
                    assertClose("tied weight gradient", emb.weight().gradient(scope.manager()),
                            scope.manager().full(new Shape(4, 4), 2f), 0);
                }
                for (AutoCloseable layer : List.of(emb, out, wrong)) {
                    layer.close();
                }
            }
            return null;
        });
    }

    @Test
    void embeddingIdsOutsideTheShardContributeZerosAndGetNoGradient() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                Initializer table = (mm, shape, dtype) -> mm.arange(0f, (float) shape.size()).reshape(shape).toType(dtype, false);
                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(8, 2, tp).initializer(table).manager(m).build();
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray ids = scope.manager().create(new int[] {0, 7, 3, 4, 3, 5}, new Shape(3, 2));
                    NDArray out = emb.forward(scope, ids);
                    // row i of the full table is (2i, 2i + 1)
                    float[] expected = {0, 1, 14, 15, 6, 7, 8, 9, 6, 7, 10, 11};
                    assertClose("looked-up rows", out, scope.manager().create(expected, new Shape(3, 2, 2)), 0);
                    scope.backward(out.sum());
                    // counts per id: 0:1, 3:2, 4:1, 5:1, 7:1 -> rank 0 rows 0..3, rank 1 rows 4..7
                    float[][] counts = {{1, 0, 0, 2}, {1, 1, 0, 1}};
                    float[] g = emb.weight().gradient(scope.manager()).toFloatArray();
                    for (int i = 0; i < 4; i++) {
                        assertEquals(counts[r][i], g[2 * i], 0, "rank " + r + " row " + i);
                        assertEquals(counts[r][i], g[2 * i + 1], 0, "rank " + r + " row " + i);
                    }
                }
                emb.close();
            }
            return null;
        });
    }

    @Test
    void shardedStateLeavesTheParameterShapesAlone() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear col = ColumnParallelLinear.builder(4, 8, tp).manager(m).build();
                RowParallelLinear row = RowParallelLinear.builder(8, 4, tp).manager(m).build();
                VocabParallelEmbedding emb = VocabParallelEmbedding.builder(8, 4, tp).manager(m).build();
                for (int i = 0; i < 3; i++) {
                    col.shardedState("a.");
                    row.shardedState("b.");
                    emb.shardedState("c.");
                }
                assertEquals(new Shape(4, 4), col.weight().data().getShape());
                assertEquals(new Shape(4, 4), row.weight().data().getShape());
                assertEquals(new Shape(4, 4), emb.weight().data().getShape());
                for (AutoCloseable layer : List.of(col, row, emb)) {
                    layer.close();
                }
            }
            return null;
        });
    }
}
