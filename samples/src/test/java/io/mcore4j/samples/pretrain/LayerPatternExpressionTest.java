package io.mcore4j.samples.pretrain;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import org.junit.jupiter.api.Test;

/** Megatron's list expressions evaluate as Python evaluates them; anything else is refused naming the flag. */
class LayerPatternExpressionTest {
    @Test
    void listsConcatenationRepetitionAndParentheses() {
        assertEquals(List.of(1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0), LayerPatternExpression.evaluate("--f", "([1]*3+[0]*1)*3"));
        assertEquals(List.of(1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0), LayerPatternExpression.evaluate("--f", "[1,1,1,0]*3"));
        assertEquals(List.of(0, 1, 1), LayerPatternExpression.evaluate("--f", "[0] + 2 * [1]"));
        assertEquals(List.of(1, 0, 1, 0), LayerPatternExpression.evaluate("--f", "[1,0]*(1*2)"));
        assertEquals(List.of(), LayerPatternExpression.evaluate("--f", "[]"));
    }

    @Test
    void otherTextIsRefusedNamingTheFlag() {
        for (String bad : new String[] {"3", "[1,0", "[1]-[0]", "[1]+2", "[1]*[2]", "__import__('os')", "[1,,0]"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> LayerPatternExpression.evaluate("--window-attn-skip-freq", bad), bad);
            assertTrue(e.getMessage().startsWith("--window-attn-skip-freq "), e.getMessage());
        }
    }
}
