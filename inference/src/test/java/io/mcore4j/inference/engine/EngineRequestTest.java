package io.mcore4j.inference.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.mcore4j.inference.SamplingParams;

import org.junit.jupiter.api.Test;

/** The checks every engine makes of a request before it queues it ({@link EngineRequest#validate}). */
class EngineRequestTest {
    private static EngineRequest request(int maxTokens, int... prompt) {
        return new EngineRequest(prompt, SamplingParams.greedy(maxTokens), null, false);
    }

    @Test
    void aRequestWithinTheLimitsPasses() {
        request(3, 0, 9, 4).validate(10, 6);
    }

    @Test
    void aPromptTokenOutsideTheVocabularyIsNamedWithItsPosition() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> request(1, 3, 10).validate(10, 16));
        assertEquals("prompt token 10 at position 1 lies outside the vocabulary [0, 10)", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> request(1, -1).validate(10, 16));
        assertEquals("prompt token -1 at position 0 lies outside the vocabulary [0, 10)", e.getMessage());
    }

    @Test
    void aPromptAndBudgetLongerThanTheModelAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> request(4, 1, 2, 3).validate(10, 6));
        assertEquals("a prompt of 3 tokens and max tokens 4 need 7 positions, more than the max model length 6", e.getMessage());
    }
}
