package io.mcore4j.moe;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import ai.djl.ndarray.types.DataType;

import java.util.function.Supplier;

import io.mcore4j.tensorparallel.MlpActivation;
import org.junit.jupiter.api.Test;

/** Validation of {@link MoeConfig} and {@link AuxLossScale}: no tensors, no communication. */
class MoeConfigTest {

    private static void refused(String message, Supplier<?> build) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build::get);
        assertEquals(message, e.getMessage());
    }

    @Test
    void errorsNameTheOffendingValues() {
        refused("number of experts must be at least 1, got 0", () -> MoeConfig.builder(0, 1, 8).build());
        refused("top-k 5 must be in [1, 4] (the number of experts)", () -> MoeConfig.builder(4, 5, 8).build());
        refused("expert ffn hidden size must be at least 1, got 0", () -> MoeConfig.builder(4, 2, 0).build());
        refused("preSoftmax applies to SOFTMAX scoring only, but the router score is SIGMOID",
                () -> MoeConfig.builder(4, 2, 8).routerScore(MoeConfig.RouterScore.SIGMOID).preSoftmax(true).build());
        refused("aux loss coefficient must be finite and >= 0, got -0.1",
                () -> MoeConfig.builder(4, 2, 8).auxLossCoeff(-0.1).build());
        refused("z-loss coefficient must be finite and >= 0, got NaN",
                () -> MoeConfig.builder(4, 2, 8).zLossCoeff(Double.NaN).build());
        refused("aux-loss-free balancing needs a positive bias update rate, got 0",
                () -> MoeConfig.builder(4, 2, 8).routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true).biasUpdateRate(0)
                        .build());
        refused("input jitter 1.0 must be in [0, 1)", () -> MoeConfig.builder(4, 2, 8).inputJitter(1).build());
        refused("padToCapacity needs a capacity factor > 0, got 0 (no capacity)",
                () -> MoeConfig.builder(4, 2, 8).padToCapacity(true).build());
        refused("shared expert ffn hidden size must be >= 0 (0 = none), got -1",
                () -> MoeConfig.builder(4, 2, 8).sharedExpertFfnHiddenSize(-1).build());
        refused("aux-loss-free balancing (expert bias) needs SIGMOID scores, but the router score is SOFTMAX",
                () -> MoeConfig.builder(4, 2, 8).auxLossFree(true).build());
        refused("top-k scaling factor 0.0 must be finite and > 0", () -> MoeConfig.builder(4, 2, 8).topKScalingFactor(0).build());
        refused("group-limited routing needs both the number of groups and the group top-k, got 4 groups and group top-k 0",
                () -> MoeConfig.builder(8, 2, 8).groupLimitedRouting(4, 0).build());
        refused("8 experts are not divisible by 3 router groups", () -> MoeConfig.builder(8, 2, 8).groupLimitedRouting(3, 1).build());
        refused("group top-k 5 must be at most the 4 router groups", () -> MoeConfig.builder(8, 6, 8).groupLimitedRouting(4, 5).build());
        refused("group top-k 3 must be at most top-k 2 (groups are ranked by the sum of their top-k / group top-k best scores)",
                () -> MoeConfig.builder(8, 2, 8).groupLimitedRouting(4, 3).build());
        refused("top-k 5 exceeds the 4 experts of 2 groups of 2", () -> MoeConfig.builder(8, 5, 8).groupLimitedRouting(4, 2).build());
        refused("the shared expert's overlap with the dispatch needs the ALL_TO_ALL dispatcher, but the dispatcher is"
                + " ALL_GATHER", () -> MoeConfig.builder(4, 2, 8).sharedExpertFfnHiddenSize(8).sharedExpertOverlap(true).build());
        refused("init std 0.0 must be finite and > 0", () -> MoeConfig.builder(4, 2, 8).initStd(0).build());
        refused("dtype int32 is not supported: use FLOAT32, FLOAT16 or BFLOAT16",
                () -> MoeConfig.builder(4, 2, 8).dtype(DataType.INT32).build());
    }

    @Test
    void theBuilderRoundTrips() {
        MoeConfig c = MoeConfig.builder(8, 2, 32).activation(MlpActivation.SWIGLU).auxLossCoeff(0.01)
                .capacityFactor(1.25).padToCapacity(true).dispatcher(MoeConfig.Dispatcher.ALL_TO_ALL)
                .sharedExpertFfnHiddenSize(16).dtype(DataType.FLOAT16).groupLimitedRouting(4, 2).topKScalingFactor(2.5)
                .sharedExpertOverlap(true).build();
        assertEquals(c, c.toBuilder().build());
        assertEquals(MoeConfig.Dispatcher.ALL_GATHER, MoeConfig.builder(8, 2, 32).build().dispatcher(),
                "Megatron-Core's default dispatcher");
    }

    @Test
    void capacityIsTheCeilingOfTheShareCappedByTheTokenCount() {
        assertEquals(4, TokenDropping.capacity(32, 2, 8, 0.5));
        assertEquals(5, TokenDropping.capacity(32, 2, 8, 0.55)); // ceil(4.4)
        assertEquals(32, TokenDropping.capacity(32, 2, 8, 100));
        assertEquals(1, TokenDropping.capacity(3, 1, 8, 0.1));
    }

    @Test
    void auxLossScaleRefusesNegativeValues() {
        AuxLossScale s = new AuxLossScale();
        assertEquals(1.0, s.get());
        s.set(0.125);
        assertEquals(0.125, s.get());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> s.set(-1));
        assertEquals("auxiliary loss scale must be finite and >= 0, got -1.0", e.getMessage());
    }
}
