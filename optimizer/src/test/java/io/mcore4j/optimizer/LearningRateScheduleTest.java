package io.mcore4j.optimizer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** Schedule values against their closed forms (acceptance test 5). */
class LearningRateScheduleTest {
    private static final double MAX = 3e-4;
    private static final double MIN = 3e-5;

    @Test
    void warmupThenCosineMatchesTheClosedForm() {
        LearningRateSchedule s = new LearningRateSchedule(MAX, MIN, 100, 1100, LearningRateSchedule.Style.COSINE);
        assertEquals(0, s.lr(0), 0);
        assertEquals(MAX * 0.5, s.lr(50), 1e-18);
        assertEquals(MAX, s.lr(100), 1e-18);
        // a quarter of the decay: (1 + cos(pi / 4)) / 2
        assertEquals(MIN + (MAX - MIN) * (1 + Math.sqrt(0.5)) / 2, s.lr(350), 1e-15);
        assertEquals((MAX + MIN) / 2, s.lr(600), 1e-15);
        assertEquals(MIN, s.lr(1100), 1e-15);
        assertEquals(MIN, s.lr(5000), 0);
        for (long step = 101; step < 1100; step++) {
            assertTrue(s.lr(step) < s.lr(step - 1), "cosine decay is strictly decreasing at " + step);
        }
    }

    @Test
    void linearAndConstantAndInverseSquareRoot() {
        LearningRateSchedule linear = new LearningRateSchedule(MAX, MIN, 10, 110, LearningRateSchedule.Style.LINEAR);
        assertEquals(MAX * 3 / 10, linear.lr(3), 1e-18);
        assertEquals(MIN + (MAX - MIN) * 0.75, linear.lr(35), 1e-15);
        assertEquals(MIN, linear.lr(110), 1e-15);
        assertEquals(MIN, linear.lr(111), 0);

        LearningRateSchedule constant = new LearningRateSchedule(MAX, MIN, 10, 0, LearningRateSchedule.Style.CONSTANT);
        assertEquals(MAX / 2, constant.lr(5), 1e-18);
        assertEquals(MAX, constant.lr(11), 0);
        assertEquals(MAX, constant.lr(1_000_000), 0);
        assertEquals(1e-3, LearningRateSchedule.constant(1e-3).lr(0), 0);

        LearningRateSchedule noWarmup = new LearningRateSchedule(MAX, 0, 0, 100, LearningRateSchedule.Style.LINEAR);
        assertEquals(MAX, noWarmup.lr(0), 0);
        assertEquals(MAX / 2, noWarmup.lr(50), 1e-18);

        LearningRateSchedule isr = new LearningRateSchedule(MAX, MIN, 16, 10_000, LearningRateSchedule.Style.INVERSE_SQUARE_ROOT);
        assertEquals(MAX / 2, isr.lr(64), 1e-18);
        assertEquals(MIN, isr.lr(9_999), 0); // sqrt(16 / 9999) * MAX is below MIN
    }

    @Test
    void weightDecayScheduleMovesFromStartToEnd() {
        WeightDecaySchedule linear = new WeightDecaySchedule(0.0, 0.1, 100, WeightDecaySchedule.Style.LINEAR);
        assertEquals(0.0, linear.at(0), 0);
        assertEquals(0.025, linear.at(25), 1e-15);
        assertEquals(0.1, linear.at(100), 1e-15);
        assertEquals(0.1, linear.at(500), 1e-15);
        WeightDecaySchedule cosine = new WeightDecaySchedule(0.0, 0.1, 100, WeightDecaySchedule.Style.COSINE);
        assertEquals(0.0, cosine.at(0), 1e-15);
        assertEquals(0.05, cosine.at(50), 1e-15);
        assertEquals(0.1 * (1 + Math.cos(Math.PI * 0.75)) / 2, cosine.at(25), 1e-15);
        assertEquals(0.1, cosine.at(100), 1e-15);
        assertEquals(0.01, WeightDecaySchedule.constant(0.01).at(7), 0);
    }

    @Test
    void invalidSchedulesNameTheProblem() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new LearningRateSchedule(1e-4, 1e-3, 0, 10, LearningRateSchedule.Style.COSINE));
        assertTrue(e.getMessage().contains("min 0.001") && e.getMessage().contains("max 1.0E-4"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> new LearningRateSchedule(1e-3, 0, 100, 50, LearningRateSchedule.Style.LINEAR));
        assertTrue(e.getMessage().contains("decay steps 50") && e.getMessage().contains("warmup steps 100"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> new WeightDecaySchedule(0.1, 0.2, 0, WeightDecaySchedule.Style.CONSTANT));
        assertTrue(e.getMessage().contains("start == end"), e.getMessage());
    }
}
