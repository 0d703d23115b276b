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
