package io.mcore4j.moe;

import static io.mcore4j.moe.Fixtures.assertClose;
import static io.mcore4j.moe.Fixtures.grad;
import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The single-rank layer (EP1, TP1) against {@link SerialMoe}, a dense reference written without
 * permutations: output, input gradient and every parameter gradient, with the auxiliary losses
 * back-propagated with a scale of 0.75 in the layer and added (times 0.75) to the reference's
 * objective. This anchors the multi-rank tests, which compare layouts against this layer.
 */
class SerialReferenceTest {
    static final int SEQ = 6;
    static final int BATCH = 2;
    static final int HIDDEN = 8;
    static final double SCALE = 0.75;

    static Stream<Arguments> configs() {
        return Stream.of(
                Arguments.of("softmax after top-k, aux + z-loss, all-gather",
                        base().auxLossCoeff(0.1).zLossCoeff(0.01).build()),
                Arguments.of("softmax before top-k, SwiGLU, sequence aux loss, all-to-all",
                        base().preSoftmax(true).activation(MlpActivation.SWIGLU).seqAuxLossCoeff(0.2)
                                .dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build()),
                Arguments.of("sigmoid top-3, aux + global aux loss",
                        MoeConfig.builder(4, 3, 12).initStd(0.3).outputInitStd(0.2)
                                .routerScore(MoeConfig.RouterScore.SIGMOID).auxLossCoeff(0.1).globalAuxLossCoeff(0.05)
                                .build()),
                Arguments.of("sigmoid top-1, biases, all-to-all",
                        MoeConfig.builder(4, 1, 12).initStd(0.3).outputInitStd(0.2).addBias(true)
                                .routerScore(MoeConfig.RouterScore.SIGMOID).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL)
                                .build()),
                Arguments.of("capacity 0.5 dropping by probability, aux loss",
                        base().capacityFactor(0.5).dropPolicy(MoeConfig.DropPolicy.PROBS).auxLossCoeff(0.1).build()),
                Arguments.of("capacity 0.75 by position, padded (batched experts), all-to-all",
                        base().capacityFactor(0.75).dropPolicy(MoeConfig.DropPolicy.POSITION).padToCapacity(true)
                                .dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL).build()),
                Arguments.of("grouped GEMM, fused permutation, SwiGLU, biases, top-3 of unequal loads, all-to-all",
                        MoeConfig.builder(4, 3, 12).initStd(0.3).outputInitStd(0.2).activation(MlpActivation.SWIGLU)
                                .addBias(true).preSoftmax(true).groupedGemm(true).permuteFusion(true)
                                .dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL)
                                .build()),
                Arguments.of("capacity 0.5 by probability, padded, fused permutation, all-gather",
                        base().capacityFactor(0.5).padToCapacity(true).permuteFusion(true).auxLossCoeff(0.1).build()),
                Arguments.of("capacity 0.75 by position, padded, sequential experts",
                        base().capacityFactor(0.75).dropPolicy(MoeConfig.DropPolicy.POSITION).padToCapacity(true)
                                .batchedExperts(false).build()));
    }

    /** A fresh builder (builders are mutable): 4 experts, top-2, width 12, large init for visible routing. */
    static MoeConfig.Builder base() {
        return MoeConfig.builder(4, 2, 12).initStd(0.3).outputInitStd(0.2);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("configs")
    void singleRankLayerMatchesTheDenseReference(String name, MoeConfig config) {
        InJvmWorld.run(1, ctx -> {
            ProcessGroups groups = Fixtures.soloGroups();
            try (NDManager m = ctx.manager().newSubManager()) {
                MoeLayer layer = MoeLayer.build(config, HIDDEN, groups, m, new SeedScheme(7), "layers.0.mlp.",
                        new AuxLossScale(SCALE));
                NDArray xFull = Fixtures.normal(m, 11, 1.0, SEQ, BATCH, HIDDEN);
                NDArray upstream = Fixtures.normal(m, 12, 0.5, SEQ, BATCH, HIDDEN);
                compare(config, layer, xFull, upstream, m);
                layer.close();
            }
            return null;
        });
    }

    /** Runs the layer and the reference on {@code xFull} and compares outputs and gradients. */
    static void compare(MoeConfig config, MoeLayer layer, NDArray xFull, NDArray upstream, NDManager m) {
        // reference on copies of the weights
        SerialMoe.Weights live = SerialMoe.Weights.of(layer);
        List<NDArray> w1 = copies(live.fc1(), m);
        List<NDArray> w2 = copies(live.fc2(), m);
        List<NDArray> b1 = copies(live.fc1Bias(), m);
        List<NDArray> b2 = copies(live.fc2Bias(), m);
        NDArray router = Fixtures.leaf(live.router(), m);
        SerialMoe.Weights copy = new SerialMoe.Weights(router, w1, w2, b1, b2);
        long tokens = (long) SEQ * BATCH;
        try (AutogradScope scope = AutogradScope.open(m)) {
            NDManager s = scope.manager();
            NDArray x = Fixtures.leaf(xFull, s);
            NDArray y = layer.forward(scope, x);
            NDArray xr = Fixtures.leaf(xFull, s);
            SerialMoe.Result ref = SerialMoe.forward(config, copy, xr.reshape(tokens, HIDDEN), SEQ, BATCH, s);
            // one backward for both: the layer's auxiliary losses come in through its own scaler
            NDArray g = upstream.reshape(tokens, HIDDEN);
            g.attach(s);
            NDArray objective = y.reshape(tokens, HIDDEN).mul(g).sum().add(ref.output().mul(g).sum())
                    .add(SerialMoe.scaled(ref.auxLoss(), SCALE, s));
            objective.attach(s);
            scope.backward(objective);

            assertClose("output", y.reshape(tokens, HIDDEN), ref.output(), 1e-5);
            assertClose("input gradient", grad(x, s), grad(xr, s), 1e-5);
            assertClose("router weight gradient", layer.router().weight().gradient(s), grad(router, s), 1e-5);
            for (int e = 0; e < config.numExperts(); e++) {
                List<Parameter> p = layer.expertParameters(e);
                List<NDArray> expected = new ArrayList<>(List.of(w1.get(e), w2.get(e)));
                if (config.addBias()) {
                    expected.add(b1.get(e));
                    expected.add(b2.get(e));
                }
                assertEquals(expected.size(), p.size());
                for (int i = 0; i < p.size(); i++) {
                    assertClose("expert " + e + " " + p.get(i).name() + " gradient",
                            Fixtures.gradOrZeros(p.get(i).data(), s), Fixtures.gradOrZeros(expected.get(i), s), 1e-5);
                }
            }
        }
    }

    private static List<NDArray> copies(List<NDArray> source, NDManager m) {
        List<NDArray> out = new ArrayList<>();
        for (NDArray a : source) {
            out.add(Fixtures.leaf(a, m));
        }
        return out;
    }
}
