package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Validation of the configuration and the loss scaler's rules, with no communication. */
class OptimizerConfigTest {

    @Test
    void defaultsAreMegatronsAndBadValuesAreNamed() {
        OptimizerConfig c = OptimizerConfig.builder().build();
        assertEquals(OptimizerConfig.Algorithm.ADAMW, c.algorithm());
        assertEquals(0.9, c.beta1());
        assertEquals(0.999, c.beta2());
        assertEquals(1e-8, c.eps());
        assertEquals(0.01, c.weightDecay());
        assertEquals(1.0, c.clipGrad());
        assertEquals(65536, c.initialLossScale());
        assertEquals(1000, c.lossScaleWindow());
        assertEquals(2, c.hysteresis());
        assertEquals(40_000_000L, c.bucketSizeBytes());
        assertEquals(c, c.toBuilder().build());

        assertMessage(() -> OptimizerConfig.builder().beta2(1.0).build(), "beta2 1.0 must be in [0, 1)");
        assertMessage(() -> OptimizerConfig.builder().lr(-1).build(), "learning rate -1.0");
        assertMessage(() -> OptimizerConfig.builder().minLossScale(4).initialLossScale(2).build(),
                "minimum loss scale 4.0");
        assertMessage(() -> OptimizerConfig.builder().bucketSizeBytes(0).build(), "bucket size 0 bytes");
        assertMessage(() -> OptimizerConfig.builder().hysteresis(0).build(), "hysteresis 0");
    }

    @Test
    void cpuOffloadIsOffByDefaultWithMegatronsFractionAndRefusesWhatMegatronRefuses() {
        OptimizerConfig c = OptimizerConfig.builder().build();
        assertEquals(false, c.optimizerCpuOffload());
        assertEquals(1.0, c.optimizerOffloadFraction());
        OptimizerConfig on = c.toBuilder().optimizerCpuOffload(true).optimizerOffloadFraction(0.25).build();
        assertEquals(on, on.toBuilder().build());
        assertEquals(0.25, on.optimizerOffloadFraction());
        assertMessage(() -> OptimizerConfig.builder().optimizerOffloadFraction(0).build(),
                "optimizer offload fraction 0.0 must be in (0, 1]");
        assertMessage(() -> OptimizerConfig.builder().optimizerOffloadFraction(1.5).build(),
                "optimizer offload fraction 1.5 must be in (0, 1]");
        assertMessage(() -> OptimizerConfig.builder().optimizerOffloadFraction(Double.NaN).build(),
                "optimizer offload fraction NaN must be in (0, 1]");
        assertMessage(() -> OptimizerConfig.builder().optimizerCpuOffload(true).algorithm(OptimizerConfig.Algorithm.ADAM)
                .build(), "optimizer CPU offload needs decoupled weight decay (ADAMW)");
    }

    @Test
    void overlappingTheParameterGatherIsOffByDefaultAndNeedsTheDistributedOptimizer() {
        assertEquals(false, OptimizerConfig.builder().build().overlapParamGather());
        OptimizerConfig on = OptimizerConfig.builder().useDistributedOptimizer(true).overlapParamGather(true).build();
        assertEquals(on, on.toBuilder().build());
        assertMessage(() -> OptimizerConfig.builder().overlapParamGather(true).build(),
                "overlapping the parameter all-gather (overlapParamGather=true) needs the distributed optimizer, which is"
                        + " off (useDistributedOptimizer=false)");
    }

    /** Megatron's rule: in order, a shard goes to the host while the host holds less than fraction x total. */
    @Test
    void hostShardsAreTheFirstUntilTheFractionIsReached() {
        java.util.List<Long> numels = java.util.List.of(60L, 10L, 30L, 3L);
        assertEquals("[true, true, true, true]", java.util.Arrays.toString(HostPlacement.chooseHostShards(numels, 1.0)));
        // 51.5 elements: 60 reach it at once
        assertEquals("[true, false, false, false]", java.util.Arrays.toString(HostPlacement.chooseHostShards(numels, 0.5)));
        // 72.1: 60 + 10 = 70 fall short, so the third goes too
        assertEquals("[true, true, true, false]", java.util.Arrays.toString(HostPlacement.chooseHostShards(numels, 0.7)));
        assertEquals("[true, false, false, false]", java.util.Arrays.toString(HostPlacement.chooseHostShards(numels, 1e-9)));
    }

    private static void assertMessage(org.junit.jupiter.api.function.Executable build, String fragment) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build);
        assertTrue(e.getMessage().contains(fragment), e.getMessage());
    }

    @Test
    void lossScalerBacksOffAfterHysteresisAndGrowsAfterTheWindow() {
        DynamicLossScaler s = new DynamicLossScaler(1024, 256, 2, 0.5, 3, 2);
        assertEquals(1024, s.update(true)); // hysteresis absorbs the first
        assertEquals(512, s.update(true));
        assertEquals(256, s.update(true));
        assertEquals(256, s.update(true)); // floor
        assertEquals(256, s.update(false));
        assertEquals(256, s.update(false));
        assertEquals(512, s.update(false)); // third clean step: grow, hysteresis restored
        assertEquals(2, s.hysteresisTracker());
        assertEquals(512, s.update(true));
        assertEquals(512, s.update(false));
        double[] state = s.state();
        DynamicLossScaler copy = new DynamicLossScaler(1024, 256, 2, 0.5, 3, 2);
        copy.restore(state);
        assertEquals(s.update(false), copy.update(false));
        assertEquals(s.update(true), copy.update(true));
        assertEquals(s.hysteresisTracker(), copy.hysteresisTracker());
    }
}
