package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.inference.Generator;
import io.mcore4j.inference.SamplingParams;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Each fixture imported at TP1, TP2 and PP2 (the Mixtral and Qwen3-MoE at TP1, PP2 and EP2: their experts at TP2 need
 * sequence parallelism, which a one-token decode step cannot split) and completed greedily by the
 * {@link Generator} (prefill, then one token at a time through the KV cache) gives the 20 tokens
 * transformers' greedy {@code generate()} gave for the same prompt, in float32. The windowed fixtures' prompt and
 * tokens (28 positions) outrun their windows (4 and 5 tokens), which transformers' cache keeps as sliding layers.
 */
class HfGenerationTest {
    static Stream<Arguments> layouts() {
        Stream.Builder<Arguments> b = Stream.builder();
        for (String name : Fixtures.all()) {
            b.add(Arguments.of(name, "TP1", ParallelDims.of(1, 1, 1)));
            if (!Fixtures.withExperts().contains(name)) {
                b.add(Arguments.of(name, "TP2", ParallelDims.of(2, 2, 1)));
            }
            b.add(Arguments.of(name, "PP2", ParallelDims.of(2, 1, 2)));
        }
        for (String name : Fixtures.withExperts()) {
            b.add(Arguments.of(name, "EP2", ParallelDims.builder(2).expertParallel(2).build()));
        }
        return b.build();
    }

    @ParameterizedTest(name = "{0} at {1}")
    @MethodSource("layouts")
    void greedyTokensMatchTransformers(String name, String layout, ParallelDims dims) {
        int[] expected = Fixtures.referenceGenerated(name);
        int[] prompt = Fixtures.prompt(name);
        List<int[]> perRank = InJvmWorld.run(dims.worldSize(), rank -> {
            ProcessGroups groups = rank.groups(dims);
            try (HfCheckpoint ck = HfCheckpoint.open(Fixtures.dir(name))) {
                TransformerConfig c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, dims.tensorParallel(),
                        DataType.FLOAT32);
                GptModel model = Fixtures.build(c, groups, rank.manager());
                ck.loadInto(List.of(model));
                return new Generator(model, ck.config().vocabSize(), -1)
                        .generate(List.of(prompt), SamplingParams.greedy(expected.length)).get(0).tokens();
            }
        });
        System.out.printf("%s at %s: greedy %s%n", name, layout, Arrays.toString(perRank.get(0)));
        for (int[] tokens : perRank) {
            assertArrayEquals(expected, tokens, name + " at " + layout + ": greedy tokens differ from transformers'");
        }
    }
}
