package io.mcore4j.tensorparallel;

import static io.mcore4j.tensorparallel.Fixtures.assertClose;
import static io.mcore4j.tensorparallel.Fixtures.chunk;
import static io.mcore4j.tensorparallel.Fixtures.sumOver;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import ai.djl.nn.Activation;
import ai.djl.pytorch.engine.PtNDArray;
import ai.djl.pytorch.jni.JniUtils;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.List;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * Acceptance 6: a TP2 embedding -> MLP (with a residual) -> output layer -> vocabulary-parallel
 * cross-entropy step equals the serial model on the same weights: loss and every gradient.
 */
class ParallelLanguageModelTest {
    static final int SEQ = 8;
    static final int BATCH = 2;
    static final int HIDDEN = 16;
    static final int FFN = 32;
    static final int VOCAB = 32;
    static final int TP = 2;

    static final Initializer EMBEDDING = Initializers.normal(1.0, 201);
    static final Initializer W1 = Initializers.normal(0.3, 202);
    static final Initializer B1 = Initializers.normal(0.5, 203);
    static final Initializer W2 = Initializers.normal(0.2, 204);
    static final Initializer B2 = Initializers.normal(0.5, 205);
    static final Initializer OUTPUT = Initializers.normal(0.3, 206);

    @ParameterizedTest(name = "tied={0} sequenceParallel={1}")
    @CsvSource({"false, false", "false, true", "true, false", "true, true"})
    void tensorParallelStepEqualsTheSerialModel(boolean tied, boolean sequenceParallel) {
        List<Float> losses = InJvmWorld.run(TP, ctx -> {
            Communicator tp = ctx.groups(ParallelDims.of(TP, TP, 1)).tp();
            int r = tp.rank();
            try (NDManager m = ctx.manager().newSubManager()) {
                VocabParallelEmbedding embedding = VocabParallelEmbedding.builder(VOCAB, HIDDEN, tp)
                        .sequenceParallel(sequenceParallel).initializer(EMBEDDING).manager(m).build();
                ColumnParallelLinear fc1 = ColumnParallelLinear.builder(HIDDEN, FFN, tp).sequenceParallel(sequenceParallel)
                        .initializer(W1).biasInitializer(B1).manager(m).build();
                RowParallelLinear fc2 = RowParallelLinear.builder(FFN, HIDDEN, tp).sequenceParallel(sequenceParallel)
                        .initializer(W2).biasInitializer(B2).manager(m).build();
                ColumnParallelLinear output = ColumnParallelLinear.builder(HIDDEN, VOCAB, tp).bias(false)
                        .sequenceParallel(sequenceParallel).skipWeightAllocation(tied).initializer(OUTPUT).manager(m).build();
                assertEquals(tied ? 0 : 1, output.parameters().size());

                NDArray ids = m.arange(0, SEQ * BATCH, 1, DataType.INT64).mul(5).add(3).mod(VOCAB).reshape(SEQ, BATCH);
                NDArray target = m.arange(0, SEQ * BATCH, 1, DataType.INT32).mul(11).add(1).mod(VOCAB).reshape(SEQ, BATCH);

                // serial reference on the full weights
                List<NDArray> w = SerialReference.leaves(m, EMBEDDING.create(m, new Shape(VOCAB, HIDDEN), DataType.FLOAT32),
                        W1.create(m, new Shape(FFN, HIDDEN), DataType.FLOAT32), B1.create(m, new Shape(FFN), DataType.FLOAT32),
                        W2.create(m, new Shape(HIDDEN, FFN), DataType.FLOAT32), B2.create(m, new Shape(HIDDEN), DataType.FLOAT32),
                        OUTPUT.create(m, new Shape(VOCAB, HIDDEN), DataType.FLOAT32));
                float serialLoss;
                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDArray h0 = JniUtils.embedding((PtNDArray) ids, (PtNDArray) w.get(0), false);
                    NDArray h = h0.add(SerialReference.mlpForward(h0, w.get(1), w.get(2), w.get(3), w.get(4)));
                    NDArray logits = JniUtils.linear((PtNDArray) h, (PtNDArray) w.get(tied ? 0 : 5), null);
                    NDArray loss = SerialReference.meanCrossEntropy(logits, target);
                    serialLoss = loss.getFloat();
                    scope.backward(loss);
                }

                try (AutogradScope scope = AutogradScope.open(m)) {
                    NDManager s = scope.manager();
                    NDArray h0 = embedding.forward(scope, ids);
                    assertEquals(new Shape(sequenceParallel ? SEQ / TP : SEQ, BATCH, HIDDEN), h0.getShape());
                    NDArray mlp = fc2.forward(scope, Activation.gelu(fc1.forward(scope, h0).output())).output();
                    NDArray h = h0.add(mlp);
                    NDArray logits = tied ? output.forward(scope, h, embedding.weight()).output() : output.forward(scope, h).output();
                    assertEquals(new Shape(SEQ, BATCH, VOCAB / TP), logits.getShape());
                    NDArray loss = VocabParallelCrossEntropy.lossPerToken(scope, tp, logits, target, 0.0).mean();
                    scope.backward(loss);

                    String at = "rank " + r + (tied ? " tied" : "") + (sequenceParallel ? " SP" : "") + ": ";
                    assertEquals(serialLoss, loss.getFloat(), 1e-5, at + "loss");
                    assertClose(at + "embedding gradient", embedding.weight().gradient(s), chunk(grad(w, 0, s), 0, TP, r, s), 1e-5);
                    assertClose(at + "fc1 weight gradient", fc1.weight().gradient(s), chunk(grad(w, 1, s), 0, TP, r, s), 1e-5);
                    assertClose(at + "fc1 bias gradient", fc1.bias().gradient(s), chunk(grad(w, 2, s), 0, TP, r, s), 1e-5);
                    assertClose(at + "fc2 weight gradient", fc2.weight().gradient(s), chunk(grad(w, 3, s), 1, TP, r, s), 1e-5);
                    NDArray db2 = fc2.bias().gradient(s);
                    assertClose(at + "fc2 bias gradient", sequenceParallel ? sumOver(tp, db2, s) : db2, grad(w, 4, s), 1e-5);
                    if (!tied) {
                        assertClose(at + "output weight gradient", output.weight().gradient(s), chunk(grad(w, 5, s), 0, TP, r, s), 1e-5);
                    }
                    float result = loss.getFloat();
                    for (AutoCloseable layer : List.of(embedding, fc1, fc2, output)) {
                        layer.close();
                    }
                    return result;
                }
            }
        });
        assertEquals(losses.get(0), losses.get(1), 0, "both ranks compute the same loss");
    }

    private static NDArray grad(List<NDArray> leaves, int index, NDManager owner) {
        return Fixtures.grad(leaves.get(index), owner);
    }
}
