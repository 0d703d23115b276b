package io.mcore4j.samples.examples;

// ---- the README's Hugging Face example: from here ----
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.training.pretrained.FineTuning;
import io.mcore4j.training.pretrained.PretrainedGpt;

import java.nio.file.Path;
import java.util.List;
import java.util.stream.IntStream;

/** A Hugging Face model on TP ranks (threads of this JVM): a prompt's logits, then fine-tuning. Arguments: DIR [TP]. */
public final class HfFineTuneExample {
    /** @param logits the prompt's logits, before fine-tuning @param losses each iteration's loss */
    public record Result(float[][][] logits, List<Double> losses) {}

    public static void main(String[] args) {
        Result r = run(Path.of(args[0]), args.length > 1 ? Integer.parseInt(args[1]) : 2);
        System.out.println("first logit " + r.logits()[0][0][0] + ", losses " + r.losses());
    }

    public static Result run(Path dir, int tp) {
        int[][] prompt = {{3, 17, 42, 99, 0, 8, 64, 23}};                   // [batch][position] token ids
        FineTuning tuning = FineTuning.builder().iterations(8).lr(1e-2).microBatchSize(2).globalBatchSize(4).build();
        return InJvmWorld.run(tp, rank -> {                                  // every rank runs this, together
            try (PretrainedGpt model = PretrainedGpt.fromHuggingFace(dir, rank.groups(ParallelDims.of(tp, tp, 1)), rank.manager())) {
                float[][][] logits = model.logits(prompt);                   // [batch][position][vocab], padding cut
                int[][] samples = IntStream.range(0, 8).mapToObj(i -> IntStream.range(0, 17) // 16 inputs + 1 label
                        .map(j -> (5 * i + j) % model.vocabSize()).toArray()).toArray(int[][]::new);
                return new Result(logits, model.fineTune(samples, tuning));  // the same on every rank
            }
        }).get(0);
    }
}
// ---- to here ----
