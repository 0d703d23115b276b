package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.fp8.AmaxComputeAlgo;
import io.mcore4j.core.fp8.Fp8Config;
import io.mcore4j.core.fp8.Fp8Format;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * A column-parallel linear followed by a row-parallel one with FP8 GEMMs (hybrid, delayed scaling, history 2 and
 * max): at TP2, with and without sequence parallelism, the outputs and the input, weight and bias gradients of three
 * steps equal the same layers at TP1 (each TP2 rank against its part), the amaxes reduced over the group with MAX so
 * that both ranks use TP1's scales. Step 1 casts with scale 1, steps 2 and 3 with the updated scales and the weights
 * cast again.
 */
class Fp8ParallelLinearTest {
    static final int SEQ = 16;
    static final int BATCH = 2;
    static final int HIDDEN = 32;
    static final int FFN = 64;
    static final double TOLERANCE = 2e-4;

    @ParameterizedTest(name = "sequence parallel {0}")
    @ValueSource(booleans = {false, true})
    void fp8AtTp2EqualsFp8AtTp1(boolean sequenceParallel) {
        Fp8Config config = Fp8Config.of(Fp8Format.HYBRID).withAmaxHistory(2, AmaxComputeAlgo.MAX);
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            Communicator solo = Fixtures.solo(ctx);
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager();
                 Fp8Scaling serial = new Fp8Scaling(config, m);
                 Fp8Scaling parallel = new Fp8Scaling(config, m)) {
                Pair one = new Pair(solo, false, serial, m);
                Pair two = new Pair(tp, sequenceParallel, parallel, m);
                assertTrue(two.fc1.toString().contains("fp8"), two.fc1.toString());
                for (int step = 0; step < 3; step++) {
                    NDArray x = Initializers.normal(1.0 + step, 700 + step).create(m, new Shape(SEQ, BATCH, HIDDEN), DataType.FLOAT32);
                    NDArray g = Initializers.normal(0.01, 800 + step).create(m, new Shape(SEQ, BATCH, HIDDEN), DataType.FLOAT32);
                    try (AutogradScope a = AutogradScope.open(m); AutogradScope b = AutogradScope.open(m)) {
                        NDArray xa = Fixtures.leaf(x, a.manager());
                        NDArray xb = Fixtures.leaf(sequenceParallel ? chunk(x, 0, 2, r, m) : x, b.manager());
                        NDArray ya = one.forward(a, xa);
                        NDArray yb = two.forward(b, xb);
                        String at = "rank " + r + " step " + step + ": ";
                        assertClose(at + "output", yb, sequenceParallel ? chunk(ya, 0, 2, r, m) : ya, TOLERANCE);
                        a.backward(new NDArray[] {ya}, new NDArray[] {g});
                        b.backward(new NDArray[] {yb}, new NDArray[] {sequenceParallel ? chunk(g, 0, 2, r, m) : g});
                        NDArray dxa = grad(xa, m);
                        assertClose(at + "input gradient", grad(xb, m), sequenceParallel ? chunk(dxa, 0, 2, r, m) : dxa, TOLERANCE);
                    }
                    String at = "rank " + r + " step " + step + ": ";
                    assertClose(at + "fc1 weight gradient", two.fc1.weight().gradient(m),
                            chunk(one.fc1.weight().gradient(m), 0, 2, r, m), TOLERANCE);
                    assertClose(at + "fc1 bias gradient", two.fc1.bias().gradient(m),
                            chunk(one.fc1.bias().gradient(m), 0, 2, r, m), TOLERANCE);
                    assertClose(at + "fc2 weight gradient", two.fc2.weight().gradient(m),
                            chunk(one.fc2.weight().gradient(m), 1, 2, r, m), TOLERANCE);
                    for (var layer : java.util.List.of(one.fc1, one.fc2, two.fc1, two.fc2)) {
                        layer.parameters().forEach(p -> io.mcore4j.core.Tensors.zeroGradient(p.data()));
                    }
                    serial.update(c -> c);
                    parallel.update(c -> tp.allReduce(c, ReduceOp.MAX, c.getManager()));
                    assertClose(at + "scales", parallel.scale(), serial.scale(), 0);
                }
                one.close();
                two.close();
            }
            return null;
        });
    }

    @Test
    void fp8IsRefusedWithTpCommOverlapAndUnalignedShards() {
        InJvmWorld.run(2, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(2, 2, 1)).tp();
            try (NDManager m = ctx.manager().newSubManager();
                 Fp8Scaling scaling = new Fp8Scaling(Fp8Config.of(Fp8Format.E4M3), m)) {
                IllegalArgumentException overlap = assertThrows(IllegalArgumentException.class, () -> ColumnParallelLinear
                        .builder(32, 64, tp).sequenceParallel(true).tpCommOverlap(true).fp8(scaling).manager(m).name("qkv").build());
                assertTrue(overlap.getMessage().startsWith("qkv: FP8 GEMMs cannot be combined with tpCommOverlap"), overlap.getMessage());
                IllegalArgumentException dims = assertThrows(IllegalArgumentException.class, () -> RowParallelLinear
                        .builder(48, 32, tp).fp8(scaling).manager(m).name("proj").build());
                assertEquals("proj: FP8 GEMMs need dims that are multiples of 16; this rank's weight is [32, 24]", dims.getMessage());
            }
            return null;
        });
    }

    /** fc1 (column-parallel, bias) then fc2 (row-parallel, bias), built from the same seeds at any TP size. */
    private static final class Pair {
        final ColumnParallelLinear fc1;
        final RowParallelLinear fc2;

        Pair(Communicator tp, boolean sequenceParallel, Fp8Scaling scaling, NDManager m) {
            fc1 = ColumnParallelLinear.builder(HIDDEN, FFN, tp).sequenceParallel(sequenceParallel).fp8(scaling)
                    .initializer(Initializers.normal(0.05, 901)).biasInitializer(Initializers.normal(0.1, 902))
                    .manager(m).name("fc1").build();
            fc2 = RowParallelLinear.builder(FFN, HIDDEN, tp).sequenceParallel(sequenceParallel).fp8(scaling)
                    .initializer(Initializers.normal(0.05, 903)).biasInitializer(Initializers.normal(0.1, 904))
                    .manager(m).name("fc2").build();
        }

        NDArray forward(AutogradScope scope, NDArray x) {
            return fc2.forward(scope, fc1.forward(scope, x).output()).output();
        }

        void close() {
            fc1.close();
            fc2.close();
        }
    }
}
