package io.mcore4j.core.nn;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.core.testing.NativeArrays;

import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

import org.junit.jupiter.api.Test;

/** A downstream user's modules: registered once, and every view of their parameters follows. */
class AbstractModuleTest {

    /** {@code y = x · wᵀ + b}, a leaf with two parameters. */
    static final class Affine extends AbstractModule implements UnaryModule {
        final Parameter weight;
        final Parameter bias;

        Affine(NDManager m, float scale, int replicaId) {
            weight = registerParameter("", new Parameter("weight", m.eye(2).mul(scale), Parameter.Partition.NONE,
                    Parameter.Kind.DENSE), replicaId);
            bias = registerParameter(new Parameter("bias", m.ones(new Shape(2)), Parameter.Partition.NONE,
                    Parameter.Kind.DENSE));
        }

        @Override
        public NDArray forward(AutogradScope scope, NDArray input) {
            NDArray out = input.matMul(weight.data().transpose()).add(bias.data());
            out.attach(scope.manager());
            return out;
        }
    }

    /** Two children and nothing else: no override of parameters, namedParameters, shardedState or close. */
    static final class TwoChildren extends AbstractModule {
        final Affine encoder;
        final Affine decoder;

        TwoChildren(NDManager m, boolean decoderIsReplica) {
            encoder = registerModule("encoder.", new Affine(m, 2, 0));
            decoder = registerModule("decoder.", new Affine(m, 3, 1), decoderIsReplica);
        }
    }

    @Test
    void aModuleWithTwoChildrenNeedsNoOverride() {
        try (NDManager m = Mcore4j.newRootManager()) {
            TwoChildren model = new TwoChildren(m, false);
            assertEquals(List.of(model.encoder.weight, model.encoder.bias, model.decoder.weight, model.decoder.bias),
                    model.parameters());
            Map<String, Parameter> named = model.namedParameters("model.");
            assertEquals(List.of("model.encoder.weight", "model.encoder.bias", "model.decoder.weight", "model.decoder.bias"),
                    List.copyOf(named.keySet()));
            assertEquals(model.parameters(), List.copyOf(named.values()), "same order as parameters()");
            List<ShardedTensor> pieces = model.shardedState("model.");
            assertEquals(List.copyOf(named.keySet()), pieces.stream().map(ShardedTensor::key).collect(Collectors.toList()));
            assertEquals(List.of(0, 0, 1, 0), pieces.stream().map(ShardedTensor::replicaId).collect(Collectors.toList()),
                    "replica ids as registered");
            assertEquals(List.of(model.encoder, model.decoder), model.children());
        }
    }

    @Test
    void aChildRegisteredAsReplicaMarksEveryPieceNonMain() {
        try (NDManager m = Mcore4j.newRootManager()) {
            TwoChildren model = new TwoChildren(m, true);
            List<Integer> ids = model.shardedState("").stream().map(ShardedTensor::replicaId).collect(Collectors.toList());
            assertEquals(List.of(0, 0, 1, 1), ids);
        }
    }

    @Test
    void closeReleasesEveryParameterOfEveryChild() {
        try (NDManager m = Mcore4j.newRootManager()) {
            int before = NativeArrays.live(m);
            TwoChildren model = new TwoChildren(m, false);
            assertTrue(NativeArrays.live(m) > before);
            model.close();
            for (Parameter p : model.parameters()) {
                assertTrue(p.data().isReleased(), p.name() + " closed");
            }
        }
    }

    @Test
    void moduleListKeysByPositionOrByTheGivenIndex() {
        try (NDManager m = Mcore4j.newRootManager()) {
            ModuleList<Affine> byPosition = new ModuleList<>();
            byPosition.add(new Affine(m, 1, 0));
            byPosition.add(new Affine(m, 1, 0));
            assertEquals(List.of("0.weight", "0.bias", "1.weight", "1.bias"),
                    List.copyOf(byPosition.namedParameters("").keySet()));
            ModuleList<Affine> byIndex = new ModuleList<>();
            byIndex.put(4, new Affine(m, 1, 0));
            byIndex.put(7, new Affine(m, 1, 0));
            assertEquals(List.of("layers.4.weight", "layers.4.bias", "layers.7.weight", "layers.7.bias"),
                    List.copyOf(byIndex.namedParameters("layers.").keySet()));
            assertEquals(2, byIndex.size());
            ModuleList<Affine> clash = new ModuleList<>();
            clash.put(1, new Affine(m, 1, 0));
            clash.put(1, new Affine(m, 1, 0));
            assertThrows(IllegalStateException.class, () -> clash.namedParameters(""), "two children under one key");
        }
    }

    @Test
    void sequentialChainsItsChildrenAndKeysThemByPosition() {
        try (NDManager m = Mcore4j.newRootManager()) {
            Sequential chain = Sequential.of(new Affine(m, 2, 0), new Affine(m, 3, 0));
            assertEquals(List.of("0.weight", "0.bias", "1.weight", "1.bias"), List.copyOf(chain.namedParameters("").keySet()));
            try (AutogradScope scope = AutogradScope.open(m)) {
                NDArray x = scope.manager().create(new float[] {1, 2}).reshape(1, 2);
                NDArray y = chain.forward(scope, x);
                // (2x + 1) * 3 + 1
                assertArrayEquals(new float[] {10, 16}, y.toFloatArray(), 0f);
                scope.backward(y.sum());
            }
            assertArrayEquals(new float[] {3, 3}, chain.parameters().get(1).data().getGradient().toFloatArray(), 0f,
                    "d sum / d b0 = 3 per element");
        }
    }

    @Test
    void refusesPathsWithoutTheTrailingDot() {
        try (NDManager m = Mcore4j.newRootManager()) {
            AbstractModule bad = new AbstractModule() {};
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> bad.registerModule("encoder", new Affine(m, 1, 0)));
            assertEquals("key path 'encoder' must be empty or end with a dot", e.getMessage());
        }
    }
}
