package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static io.mcore4j.tensorparallel.Fixtures.sumOver;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 4: a column-parallel -> gelu -> row-parallel MLP matches the serial MLP built from the
 * same full weights, output and every gradient, with and without sequence parallelism.
 */
class ParallelMlpTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int HIDDEN = 16;
    static final int FFN = 32;

    static final Initializer W1 = Initializers.normal(0.3, 101);
    static final Initializer B1 = Initializers.normal(0.5, 102);
    static final Initializer W2 = Initializers.normal(0.2, 103);
    static final Initializer B2 = Initializers.normal(0.5, 104);
    static final Initializer INPUT = Initializers.normal(1.0, 105);
    static final Initializer UPSTREAM = Initializers.normal(0.25, 106);

    @ParameterizedTest(name = "TP{0} sequenceParallel={1} {2}")
    @CsvSource({
        "2, false, FLOAT32, 1e-5", "2, true, FLOAT32, 1e-5", "4, false, FLOAT32, 1e-5", "4, true, FLOAT32, 1e-5",
        "2, false, FLOAT16, 1e-2", "2, true, FLOAT16, 1e-2", "4, false, FLOAT16, 1e-2", "4, true, FLOAT16, 1e-2"})
    void columnGeluRowMatchesTheSerialMlp(int tpSize, boolean sequenceParallel, DataType dtype, double tolerance) {
        InJvmWorld.run(tpSize, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(tpSize, tpSize, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                ColumnParallelLinear fc1 = ColumnParallelLinear.builder(HIDDEN, FFN, tp).sequenceParallel(sequenceParallel)
                        .initializer(W1).biasInitializer(B1).dtype(dtype).manager(m).name("fc1").build();
                RowParallelLinear fc2 = RowParallelLinear.builder(FFN, HIDDEN, tp).sequenceParallel(sequenceParallel)
                        .initializer(W2).biasInitializer(B2).dtype(dtype).manager(m).name("fc2").build();
                Shape act = new Shape(SEQ, BATCH, HIDDEN);
                NDArray xFull = INPUT.create(m, act, dtype);
                NDArray gFull = UPSTREAM.create(m, act, dtype);
                SerialReference.Mlp ref = SerialReference.mlp(m, xFull, W1.create(m, new Shape(FFN, HIDDEN), dtype),
                        B1.create(m, new Shape(FFN), dtype), W2.create(m, new Shape(HIDDEN, FFN), dtype),
                        B2.create(m, new Shape(HIDDEN), dtype), gFull);

                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    NDArray x = Fixtures.leaf(sequenceParallel ? chunk(xFull, 0, tpSize, r, s) : xFull, s);
                    NDArray h = Activation.gelu(fc1.forward(scope, x).output());
                    NDArray y = fc2.forward(scope, h).output();
                    NDArray g = sequenceParallel ? chunk(gFull, 0, tpSize, r, s) : gFull;
                    scope.backward(new NDArray[] {y}, new NDArray[] {g});

                    String at = "rank " + r + ": ";
                    check(at + "output", y, sequenceParallel ? chunk(ref.y(), 0, tpSize, r, s) : ref.y(), tolerance);
                    check(at + "input gradient", grad(x, s), sequenceParallel ? chunk(ref.dx(), 0, tpSize, r, s) : ref.dx(), tolerance);
                    check(at + "fc1 weight gradient", fc1.weight().gradient(s), chunk(ref.dw1(), 0, tpSize, r, s), tolerance);
                    check(at + "fc1 bias gradient", fc1.bias().gradient(s), chunk(ref.db1(), 0, tpSize, r, s), tolerance);
                    check(at + "fc2 weight gradient", fc2.weight().gradient(s), chunk(ref.dw2(), 1, tpSize, r, s), tolerance);
                    // with sequence parallelism each rank saw its sequence chunk only: the optimizer sums over TP
                    NDArray db2 = fc2.bias().gradient(s);
                    check(at + "fc2 bias gradient", sequenceParallel ? sumOver(tp, db2, s) : db2, ref.db2(), tolerance);
                }
                fc1.close();
                fc2.close();
            }
            return null;
        });
    }

    /** Absolute difference for float32; for float16 relative to the reference's largest magnitude (at least 1). */
    private static void check(String what, NDArray actual, NDArray expected, double tolerance) {
        NDArray a = actual.toType(DataType.FLOAT32, true);
        NDArray e = expected.toType(DataType.FLOAT32, true);
        try {
            double d = actual.getDataType() == DataType.FLOAT16 ? NativeArrays.maxRelDiff(a, e) : NativeArrays.maxAbsDiff(a, e);
            if (!(d <= tolerance)) {
                throw new AssertionError(what + ": difference " + d + " exceeds " + tolerance);
            }
        } finally {
            a.close();
            e.close();
        }
    }
}
