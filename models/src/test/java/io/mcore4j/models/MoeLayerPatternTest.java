package io.mcore4j.models;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.moe.MoeConfig;
import io.mcore4j.tensorparallel.MlpActivation;

import java.util.List;

import org.junit.jupiter.api.Test;

/** Megatron's --moe-layer-freq values as {@link MoeLayerPattern}s, and the MoE settings a model stores. */
class MoeLayerPatternTest {
    private static String refusal(String text) {
        return assertThrows(IllegalArgumentException.class, () -> MoeLayerPattern.parse(text)).getMessage();
    }

    @Test
    void listExpressionsEvaluateAsPythonDoes() {
        assertEquals(List.of(0, 1, 1, 1), MoeLayerPattern.parse("([0]*1+[1]*3)").layers());
        assertEquals(List.of(0, 1, 1, 1), MoeLayerPattern.parse("[0,1,1,1]").layers());
        assertEquals(List.of(1, 1, 1, 0, 0, 1, 1, 1, 0, 0), MoeLayerPattern.parse("([1]*3+[0]*2)*2").layers());
        assertEquals(List.of(1, 0, 1, 0, 1, 0), MoeLayerPattern.parse("3 * [1, 0,]").layers(), "int * list, blanks, trailing comma");
        assertEquals(List.of(0, 1, 1, 1, 1, 1), MoeLayerPattern.parse("[0]+[1]*(2+3)").layers(), "arithmetic in a count");
        assertEquals(MoeLayerPattern.every(2), MoeLayerPattern.parse("2"));
        assertEquals("[0,1,1,1]", MoeLayerPattern.parse("([0]*1+[1]*3)").toString());
    }

    @Test
    void anythingElseIsRefusedWithItsPosition() {
        assertEquals("expected ')' at position 12 of ([0]*1+[1]*3", refusal("([0]*1+[1]*3"));
        assertEquals("cannot add a list and a number at position 5 of [1]+1", refusal("[1]+1"));
        assertEquals("cannot multiply two lists at position 7 of [1]*[2]", refusal("[1]*[2]"));
        assertEquals("a list inside a list at position 4 of [[1]]", refusal("[[1]]"));
        assertEquals("unexpected '_' at position 0 of __import__('os')[0]", refusal("__import__('os')[0]"));
        assertEquals("unexpected '-' at position 1 of [-1]", refusal("[-1]"));
        assertEquals("the list would have more than 1048576 entries at position 13 of [1]*100000000",
                refusal("[1]*100000000"));
        assertEquals("MoE layer pattern [0, 2] may hold 0 (dense) and 1 (experts) only", refusal("[0,2]"));
        assertEquals("[1]*0 is an empty list", refusal("[1]*0"));
        assertEquals("expected an integer or a list expression such as ([0]*1+[1]*3), got two", refusal("two"));
        assertEquals("MoE layer frequency 0 must be at least 1", refusal("0"));
    }

    @Test
    void aModelPlacesItsMoeLayersByThePatternAndGivesThemItsOwnNumerics() {
        MoeConfig experts = MoeConfig.builder(4, 2, 16).routerScore(MoeConfig.RouterScore.SIGMOID).auxLossFree(true)
                .groupLimitedRouting(2, 1).sharedExpertFfnHiddenSize(8).build();
        TransformerConfig c = TransformerConfig.builder(4, 32, 4, 128).activation(MlpActivation.SWIGLU).addBiasLinear(false)
                .initStd(0.01).dtype(DataType.BFLOAT16)
                .moe(new TransformerConfig.MoeSettings(MoeLayerPattern.parse("([0]*1+[1]*3)"), experts)).build();
        assertFalse(c.isMoeLayer(0));
        assertTrue(c.isMoeLayer(1) && c.isMoeLayer(2) && c.isMoeLayer(3));
        MoeConfig stored = c.moe().config();
        assertEquals(experts.toBuilder().activation(MlpActivation.SWIGLU).addBias(false).initStd(0.01)
                .outputInitStd(0.01 / Math.sqrt(8)).dtype(DataType.BFLOAT16).build(), stored);
        assertEquals("MoE layer pattern [0,1,1,1] has 4 entries for 3 layers", assertThrows(IllegalArgumentException.class,
                () -> TransformerConfig.builder(3, 32, 4, 128).moe(c.moe()).build()).getMessage());
        assertEquals("top-1 routing with the softmax after the top-k gives the router no gradient: use the softmax before"
                + " the top-k (preSoftmax, Megatron's --moe-router-pre-softmax)", assertThrows(IllegalArgumentException.class,
                () -> TransformerConfig.MoeSettings.of(4, 1, MoeLayerPattern.every(1), 8, 0, MoeConfig.Dispatcher.ALL_GATHER))
                .getMessage());
    }
}
