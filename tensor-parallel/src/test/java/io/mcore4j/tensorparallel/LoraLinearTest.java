package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;

/**
 * {@link LoraLinear} on column- and row-parallel bases equals the serial LoRA computed explicitly,
 * {@code y = x Wᵀ + (alpha/r) (x Aᵀ) Bᵀ}, at TP1, TP2 and TP4, with and without sequence parallelism and
 * with a strided (fused {@code [gate; up]}) column base: outputs, input gradients, and the weight
 * gradients of W, A and B (sequence-parallel replicated ones summed over the group, as the optimizer
 * does). A frozen base gets no gradient while the adapter's stay the same; a fresh adapter changes
 * nothing; the merged weight is {@code W + (alpha/r)·B·A}.
 */
class LoraLinearTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int IN = 8;
    static final int OUT = 16;
    static final int RANK = 3;
    static final double ALPHA = 6;
    static final double TOLERANCE = 1e-5;

    @ParameterizedTest(name = "{0} TP{1} sequenceParallel={2} stride={3} frozenBase={4}")
    @CsvSource({
        "column, 1, false, 1, false", "column, 2, false, 1, false", "column, 2, true, 1, false",
        "column, 2, false, 2, false", "column, 4, true, 2, true", "column, 2, false, 1, true",
        "row, 1, false, 1, false", "row, 2, false, 1, false", "row, 2, true, 1, false", "row, 4, false, 1, true",
        "row, 4, true, 1, false"})
    void equalsTheExplicitSerialLora(String kind, int tpSize, boolean sp, int stride, boolean frozenBase) {
        boolean column = kind.equals("column");
        InJvmWorld.run(tpSize, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                Initializer weight = Initializers.normal(0.3, 11);
                NDArray wFull = weight.create(m, new Shape(OUT, IN), DataType.FLOAT32);
                NDArray aFull = Initializers.kaimingUniform(12).create(m, new Shape(RANK, IN), DataType.FLOAT32);
                NDArray bFull = Initializers.normal(0.5, 13).create(m, new Shape(OUT, RANK), DataType.FLOAT32);
                NDArray xFull = Initializers.normal(1.0, 14).create(m, new Shape(SEQ, BATCH, IN), DataType.FLOAT32);
                NDArray gFull = Initializers.normal(0.25, 15).create(m, new Shape(SEQ, BATCH, OUT), DataType.FLOAT32);
                ParallelLinear base = column
                        ? ColumnParallelLinear.builder(IN, OUT, tp).bias(false).gatherOutput(false).sequenceParallel(sp)
                                .stride(stride).initializer(weight).manager(m).name("fc1").build()
                        : RowParallelLinear.builder(IN, OUT, tp).bias(false).sequenceParallel(sp)
                                .initializer(weight).manager(m).name("fc2").build();
                LoraLinear lora = LoraLinear.builder(base).rank(RANK).alpha(ALPHA)
                        .initializer(Initializers.kaimingUniform(12)).manager(m).name("lora").build();
                StridedPartition rows = new StridedPartition(0, r, tpSize, stride);
                StridedPartition outCols = new StridedPartition(2, r, tpSize, stride);
                assertClose("a fresh B is zero", lora.linearOut().data(), lora.linearOut().data().zerosLike(), 0);
                Tensors.copyInto(lora.linearOut().data(), column ? rows.slice(bFull, m) : bFull);
                if (frozenBase) {
                    for (io.mcore4j.core.nn.Parameter p : base.parameters()) {
                        p.freeze();
                    }
                }
                // the serial reference, every rank alike
                NDArray x0;
                NDArray w0;
                NDArray a0;
                NDArray b0;
                NDArray y0;
                try (AutogradScope s = AutogradScope.open(m)) {
                    x0 = Fixtures.leaf(xFull, m);
                    w0 = Fixtures.leaf(wFull, m);
                    a0 = Fixtures.leaf(aFull, m);
                    b0 = Fixtures.leaf(bFull, m);
                    NDArray h = Tensors.linear(x0, a0, null, s.manager());
                    y0 = Tensors.linear(x0, w0, null, s.manager())
                            .add(Tensors.linear(h, b0, null, s.manager()).mul(ALPHA / RANK));
                    y0.attach(m);
                    s.backward(new NDArray[] {y0}, new NDArray[] {gFull});
                }
                try (AutogradScope s = AutogradScope.open(m)) {
                    NDArray xLocal = column
                            ? (sp ? chunk(xFull, 0, tpSize, r, s.manager()) : xFull.duplicate())
                            : chunk(xFull, 2, tpSize, r, s.manager());
                    NDArray x = Fixtures.leaf(xLocal, s.manager());
                    NDArray y = lora.forward(s, x).output();
                    NDArray expected = column ? outCols.slice(sp ? y0 : y0, s.manager()) : y0;
                    NDArray g = column ? outCols.slice(gFull, s.manager()) : gFull;
                    if (sp && column) {
                        // the column layer's output is the whole sequence; its input was the chunk
                    } else if (sp) {
                        expected = chunk(y0, 0, tpSize, r, s.manager());
                        g = chunk(gFull, 0, tpSize, r, s.manager());
                    }
                    String at = kind + " rank " + r + ": ";
                    assertClose(at + "output", y, expected, TOLERANCE);
                    s.backward(new NDArray[] {y}, new NDArray[] {g});
                    NDArray xGrad = grad(x0, s.manager());
                    NDArray xGradExpected = column ? (sp ? chunk(xGrad, 0, tpSize, r, s.manager()) : xGrad)
                            : chunk(xGrad, 2, tpSize, r, s.manager());
                    assertClose(at + "input gradient", grad(x, s.manager()), xGradExpected, TOLERANCE);
                }
                String at = kind + " rank " + r + ": ";
                NDArray aGrad = lora.linearIn().gradient(m);
                NDArray bGrad = lora.linearOut().gradient(m);
                if (column) {
                    assertClose(at + "A gradient", sp ? Fixtures.sumOver(tp, aGrad, m) : aGrad, grad(a0, m), TOLERANCE);
                    assertClose(at + "B gradient", bGrad, rows.slice(grad(b0, m), m), TOLERANCE);
                } else {
                    assertClose(at + "A gradient", aGrad, chunk(grad(a0, m), 1, tpSize, r, m), TOLERANCE);
                    assertClose(at + "B gradient", sp ? Fixtures.sumOver(tp, bGrad, m) : bGrad, grad(b0, m), TOLERANCE);
                }
                NDArray baseWeight = base.parameters().get(0).data();
                if (frozenBase) {
                    assertNull(base.parameters().get(0).gradient(m), "a frozen base weight gets no gradient");
                } else {
                    NDArray wGrad = column ? rows.slice(grad(w0, m), m) : chunk(grad(w0, m), 1, tpSize, r, m);
                    assertClose(at + "W gradient", base.parameters().get(0).gradient(m), wGrad, TOLERANCE);
                }
                NDArray merged = lora.mergedWeight(m);
                NDArray mergedFull = wFull.add(bFull.matMul(aFull).mul(ALPHA / RANK));
                assertClose(at + "merged weight", merged,
                        column ? rows.slice(mergedFull, m) : chunk(mergedFull, 1, tpSize, r, m), TOLERANCE);
                assertEquals(baseWeight.getShape(), merged.getShape());
                lora.close();
            }
            return null;
        });
    }

    @Test
    void adapterPiecesAreKeyedLikeMegatronBridgeAndSplitLikeTheBase() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                LoraLinear column = LoraLinear.builder(ColumnParallelLinear.builder(IN, OUT, tp).gatherOutput(false).stride(2)
                        .manager(m).build()).rank(RANK).alpha(ALPHA).initializer(Initializers.kaimingUniform(1)).manager(m).build();
                List<ShardedTensor> pieces = column.shardedState("mlp.linear_fc1.");
                List<String> keys = pieces.stream().map(ShardedTensor::key).toList();
                assertEquals(List.of("mlp.linear_fc1.weight", "mlp.linear_fc1.weight", "mlp.linear_fc1.bias",
                        "mlp.linear_fc1.bias", "mlp.linear_fc1.adapter.linear_in.weight",
                        "mlp.linear_fc1.adapter.linear_out.weight", "mlp.linear_fc1.adapter.linear_out.weight"), keys);
                ShardedTensor a = pieces.get(4);
                assertEquals(tp.rank() == 0, a.isMainReplica(), "A is written by TP rank 0");
                assertTrue(LoraLinear.isAdapterKey("decoder.layers.0.mlp.linear_fc1.adapter.linear_out.weight"));
                assertTrue(!LoraLinear.isAdapterKey("decoder.layers.0.mlp.linear_fc1.weight"));
                assertEquals(List.of("mlp.linear_fc1.weight", "mlp.linear_fc1.bias", "mlp.linear_fc1.adapter.linear_in.weight",
                        "mlp.linear_fc1.adapter.linear_out.weight"), List.copyOf(column.namedParameters("mlp.linear_fc1.").keySet()));
                column.close();
            }
            return null;
        });
    }

    @Test
    void badOptionsAreRefusedNamingTheLayer() {
        InJvmWorld.run(1, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(1, 1, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear gathered = ColumnParallelLinear.builder(IN, OUT, tp).gatherOutput(true).manager(m).build();
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LoraLinear.builder(gathered)
                        .rank(2).alpha(4).initializer(Initializers.zeros()).manager(m).name("head").build());
                assertEquals("head: a LoRA adapter needs a column-parallel base without gatherOutput", e.getMessage());
                IllegalArgumentException rank = assertThrows(IllegalArgumentException.class, () -> LoraLinear.builder(gathered)
                        .rank(0).alpha(4).initializer(Initializers.zeros()).manager(m).name("qkv").build());
                assertEquals("qkv: LoRA rank must be at least 1, got 0", rank.getMessage());
                gathered.close();
            }
            return null;
        });
    }
}
