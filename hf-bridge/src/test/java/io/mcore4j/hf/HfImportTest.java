package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.ParallelDims;

import java.util.stream.Stream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Each fixture imported at TP1, TP2 and PP2 (and the Mixtral and the Qwen3-MoE also at EP2 and EP2 x TP2) gives the
 * logits transformers computed for the same prompt, within 1e-5 of their scale, in float32. The
 * fixtures cover bf16, fp16 and fp32 files, a sharded checkpoint, GQA, LLaMA 3.1 rope scaling,
 * tied and untied heads, QKV biases, Qwen3's QK-norm with a head dimension other than hidden / heads, experts (Qwen3-MoE's
 * fine-grained ones with norm_topk_prob beside a dense layer),
 * GPT-2's Conv1D weights, and sliding windows shorter than the prompt (Mistral's on every layer, Qwen2's on the
 * layers from max_window_layers on); padded vocabulary logits are 0.
 */
class HfImportTest {
    static Stream<Arguments> layouts() {
        Stream.Builder<Arguments> b = Stream.builder();
        for (String name : Fixtures.all()) {
            b.add(Arguments.of(name, "TP1", ParallelDims.of(1, 1, 1)));
            b.add(Arguments.of(name, "TP2", ParallelDims.of(2, 2, 1)));
            b.add(Arguments.of(name, "PP2", ParallelDims.of(2, 1, 2)));
        }
        for (String name : Fixtures.withExperts()) {
            b.add(Arguments.of(name, "EP2", ParallelDims.builder(2).expertParallel(2).build()));
            b.add(Arguments.of(name, "TP2xEP2", ParallelDims.builder(4).tensorParallel(2).expertParallel(2).build()));
        }
        return b.build();
    }

    /** float16 parameters (bf16 weights converted in Java, then to fp16 in the copy): within fp16's precision. */
    @org.junit.jupiter.api.Test
    void float16ParametersAtTp2() {
        float[][] expected = Fixtures.referenceLogits("llama");
        float[][] actual = Fixtures.logits(Fixtures.dir("llama"), ParallelDims.of(2, 2, 1), Fixtures.prompt("llama"), null,
                ai.djl.ndarray.types.DataType.FLOAT16);
        double error = Fixtures.relativeError(actual, expected);
        System.out.printf("llama at TP2 in float16: logits relative error %.3g%n", error);
        assertTrue(error <= 1e-2, "float16: " + error);
    }

    @ParameterizedTest(name = "{0} at {1}")
    @MethodSource("layouts")
    void logitsMatchTransformers(String name, String layout, ParallelDims dims) {
        float[][] expected = Fixtures.referenceLogits(name);
        float[][] actual = Fixtures.logits(Fixtures.dir(name), dims, Fixtures.prompt(name), null);
        double error = Fixtures.relativeError(actual, expected);
        System.out.printf("%s at %s: logits relative error %.3g%n", name, layout, error);
        assertTrue(error <= 1e-5, name + " at " + layout + ": logits differ from transformers' by " + error
                + " of their scale");
    }
}
