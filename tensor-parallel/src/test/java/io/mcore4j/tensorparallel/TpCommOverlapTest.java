package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;


import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Megatron's {@code --tp-comm-overlap}: the sequence-parallel column- and row-parallel linears built
 * with {@code tpCommOverlap} (the all-gather and reduce-scatter cut into pieces pipelined with the
 * GEMMs) give the composed layers' outputs and input, weight and bias gradients, on in-JVM ranks
 * (whose started collectives run at once, so this checks the piece arithmetic). Two passes each,
 * so gradients also accumulate into {@code .grad} alike. Sequence lengths give one piece per rank
 * up to the group size, fewer, and one.
 */
class TpCommOverlapTest {
    static final int BATCH = 2;
    static final int IN = 8;
    static final int OUT = 12;
    static final double TOLERANCE = 1e-6;

    static final Initializer WEIGHT = Initializers.normal(0.3, 201);
    static final Initializer BIAS = Initializers.normal(0.5, 202);
    static final Initializer INPUT = Initializers.normal(1.0, 203);
    static final Initializer UPSTREAM = Initializers.normal(0.25, 204);

    @ParameterizedTest(name = "TP{0} sequence {1} bias={2} skipBiasAdd={3}")
    @CsvSource({
        "2, 8, true, false", "2, 8, false, false", "2, 6, true, false", "2, 8, true, true",
        "4, 16, true, false", "4, 16, false, false", "4, 8, true, false", "4, 12, true, false", "4, 4, true, true"})
    void overlappedColumnLinearEqualsTheComposedOne(int tpSize, int seq, boolean bias, boolean skipBiasAdd) {
        InJvmWorld.run(tpSize, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear plain = column(tp, m, bias, skipBiasAdd, false);
                ColumnParallelLinear overlapped = column(tp, m, bias, skipBiasAdd, true);
                assertTrue(overlapped.toString().contains("tp comm overlap"), overlapped.toString());
                for (int pass = 0; pass < 2; pass++) {
                    Shape full = new Shape(seq, BATCH, IN);
                    NDArray xFull = Initializers.normal(1.0, 300 + pass).create(m, full, DataType.FLOAT32);
                    NDArray gFull = Initializers.normal(0.25, 400 + pass).create(m, new Shape(seq, BATCH, OUT / tpSize * tpSize), DataType.FLOAT32);
                    NDArray g = chunk(gFull, 2, tpSize, r, m);
                    try (AutogradScope a = AutogradScope.open(m); AutogradScope b = AutogradScope.open(m)) {
                        NDArray xa = Fixtures.leaf(chunk(xFull, 0, tpSize, r, a.manager()), a.manager());
                        NDArray xb = Fixtures.leaf(chunk(xFull, 0, tpSize, r, b.manager()), b.manager());
                        LinearOutput ya = plain.forward(a, xa);
                        LinearOutput yb = overlapped.forward(b, xb);
                        assertEquals(new Shape(seq, BATCH, OUT / tpSize), yb.output().getShape());
                        String at = "rank " + r + " pass " + pass + ": ";
                        assertClose(at + "output", yb.output(), ya.output(), TOLERANCE);
                        if (skipBiasAdd) {
                            assertSame(overlapped.bias().data(), yb.bias());
                        } else {
                            assertNull(yb.bias());
                        }
                        a.backward(new NDArray[] {ya.output()}, new NDArray[] {g});
                        b.backward(new NDArray[] {yb.output()}, new NDArray[] {g});
                        assertClose(at + "input gradient", grad(xb, b.manager()), grad(xa, a.manager()), TOLERANCE);
                    }
                    String at = "rank " + r + " after " + (pass + 1) + " passes: ";
                    assertClose(at + "weight gradient", overlapped.weight().gradient(m), plain.weight().gradient(m), TOLERANCE);
                    if (bias && !skipBiasAdd) {
                        assertClose(at + "bias gradient", overlapped.bias().gradient(m), plain.bias().gradient(m), TOLERANCE);
                    }
                }
                checkNoGradForward(tp, m, plain, overlapped, seq);
                plain.close();
                overlapped.close();
            }
            return null;
        });
    }

    @ParameterizedTest(name = "TP{0} sequence {1} bias={2} skipBiasAdd={3}")
    @CsvSource({
        "2, 8, true, false", "2, 8, false, false", "2, 6, true, false", "2, 8, true, true",
        "4, 16, true, false", "4, 16, false, false", "4, 8, true, false", "4, 12, true, false", "4, 4, true, true"})
    void overlappedRowLinearEqualsTheComposedOne(int tpSize, int seq, boolean bias, boolean skipBiasAdd) {
        InJvmWorld.run(tpSize, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
            int r = tp.rank();
            int in = IN * tpSize / 2;
            try (NDManager m = ctx.manager().newSubManager()) {
                RowParallelLinear plain = row(tp, m, in, bias, skipBiasAdd, false);
                RowParallelLinear overlapped = row(tp, m, in, bias, skipBiasAdd, true);
                for (int pass = 0; pass < 2; pass++) {
                    NDArray xFull = Initializers.normal(1.0, 500 + pass).create(m, new Shape(seq, BATCH, in), DataType.FLOAT32);
                    NDArray gFull = Initializers.normal(0.25, 600 + pass).create(m, new Shape(seq, BATCH, OUT), DataType.FLOAT32);
                    NDArray g = chunk(gFull, 0, tpSize, r, m);
                    try (AutogradScope a = AutogradScope.open(m); AutogradScope b = AutogradScope.open(m)) {
                        NDArray xa = Fixtures.leaf(chunk(xFull, 2, tpSize, r, a.manager()), a.manager());
                        NDArray xb = Fixtures.leaf(chunk(xFull, 2, tpSize, r, b.manager()), b.manager());
                        LinearOutput ya = plain.forward(a, xa);
                        LinearOutput yb = overlapped.forward(b, xb);
                        assertEquals(new Shape(seq / tpSize, BATCH, OUT), yb.output().getShape());
                        String at = "rank " + r + " pass " + pass + ": ";
                        assertClose(at + "output", yb.output(), ya.output(), TOLERANCE);
                        if (skipBiasAdd) {
                            assertSame(overlapped.bias().data(), yb.bias());
                        }
                        a.backward(new NDArray[] {ya.output()}, new NDArray[] {g});
                        b.backward(new NDArray[] {yb.output()}, new NDArray[] {g});
                        assertClose(at + "input gradient", grad(xb, b.manager()), grad(xa, a.manager()), TOLERANCE);
                    }
                    String at = "rank " + r + " after " + (pass + 1) + " passes: ";
                    assertClose(at + "weight gradient", overlapped.weight().gradient(m), plain.weight().gradient(m), TOLERANCE);
                    if (bias && !skipBiasAdd) {
                        assertClose(at + "bias gradient", overlapped.bias().gradient(m), plain.bias().gradient(m), TOLERANCE);
                    }
                }
                try (AutogradScope a = AutogradScope.openNoGrad(m); AutogradScope b = AutogradScope.openNoGrad(m)) {
                    NDArray x = chunk(INPUT.create(m, new Shape(seq, BATCH, in), DataType.FLOAT32), 2, tpSize, r, m);
                    assertClose("rank " + r + " no-grad output", overlapped.forward(b, x).output(),
                            plain.forward(a, x).output(), TOLERANCE);
                }
                plain.close();
                overlapped.close();
            }
            return null;
        });
    }

    @Test
    void overlapWithoutSequenceParallelismIsRefusedNamingTheLayer() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager()) {
                IllegalArgumentException column = assertThrows(IllegalArgumentException.class,
                        () -> ColumnParallelLinear.builder(IN, OUT, tp).tpCommOverlap(true).manager(m).name("qkv").build());
                assertEquals("qkv: tpCommOverlap overlaps the sequence-parallel collectives; it needs sequenceParallel(true)",
                        column.getMessage());
                IllegalArgumentException row = assertThrows(IllegalArgumentException.class,
                        () -> RowParallelLinear.builder(IN, OUT, tp).tpCommOverlap(true).manager(m).name("proj").build());
                assertEquals("proj: tpCommOverlap overlaps the sequence-parallel collectives; it needs sequenceParallel(true)",
                        row.getMessage());
            }
            return null;
        });
    }

    private static void checkNoGradForward(Communicator tp, NDManager m, ColumnParallelLinear plain,
                                           ColumnParallelLinear overlapped, int seq) {
        try (AutogradScope a = AutogradScope.openNoGrad(m); AutogradScope b = AutogradScope.openNoGrad(m)) {
            NDArray x = chunk(INPUT.create(m, new Shape(seq, BATCH, IN), DataType.FLOAT32), 0, tp.size(), tp.rank(), m);
            assertClose("rank " + tp.rank() + " no-grad output", overlapped.forward(b, x).output(),
                    plain.forward(a, x).output(), TOLERANCE);
        }
    }

    private static ColumnParallelLinear column(Communicator tp, NDManager m, boolean bias, boolean skipBiasAdd, boolean overlap) {
        return ColumnParallelLinear.builder(IN, OUT / tp.size() * tp.size(), tp).sequenceParallel(true).tpCommOverlap(overlap)
                .bias(bias).skipBiasAdd(skipBiasAdd).initializer(WEIGHT).biasInitializer(BIAS).manager(m)
                .name(overlap ? "overlapped" : "composed").build();
    }

    private static RowParallelLinear row(Communicator tp, NDManager m, int in, boolean bias, boolean skipBiasAdd, boolean overlap) {
        return RowParallelLinear.builder(in, OUT, tp).sequenceParallel(true).tpCommOverlap(overlap)
                .bias(bias).skipBiasAdd(skipBiasAdd).initializer(WEIGHT).biasInitializer(BIAS).manager(m)
                .name(overlap ? "overlapped" : "composed").build();
    }
}
