package io.mcore4j.planner;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.Precision;
import io.mcore4j.data.gpt.MockGptDataset;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.TransformerConfig.Recompute;
import io.mcore4j.models.transformer.AttentionBackend;
import io.mcore4j.optimizer.LearningRateSchedule;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.training.CheckpointConfig;
import io.mcore4j.training.TrainingConfig;
import io.mcore4j.training.gpt.GptPretraining;
import io.mcore4j.training.gpt.GptTrainingSetup;

import java.io.OutputStream;
import java.io.PrintStream;
import java.time.Duration;
import java.util.Locale;

/** Runs a few training iterations of a workload at a layout on in-JVM ranks and measures the native peak. */
final class CpuProbe {
    private CpuProbe() {}

    static GptTrainingSetup setup(Workload w, Layout layout, int iterations) {
        TransformerConfig c = w.modelFor(layout);
        TrainingConfig training = new TrainingConfig(iterations, LearningRateSchedule.constant(1e-4), 0, 1000, 0, 0,
                CheckpointConfig.NONE, 1);
        return new GptTrainingSetup(c, w.attention(), layout.tensorParallel(), layout.pipelineParallel(),
                layout.virtualStages(), layout.expertParallel(), layout.contextParallel(), w.optimizerFor(layout),
                layout.microBatchSize(), w.globalBatchSize(), w.seqLength(), training, 1, false);
    }

    static void run(Workload w, Layout layout, int iterations) {
        GptTrainingSetup setup = setup(w, layout, iterations);
        MockGptDataset data = new MockGptDataset(w.globalBatchSize() * iterations, w.seqLength(), w.model().vocabSize(), 3);
        PrintStream quiet = new PrintStream(OutputStream.nullOutputStream());
        InJvmWorld.run(layout.worldSize(), Duration.ofMinutes(5), rank -> GptPretraining.run(setup, rank.backend(),
                rank.manager(), data, null, b -> b.out(quiet), false));
    }

    /** @return the measured peak bytes of the run above the resident set before it */
    static long measure(Workload w, Layout layout) {
        run(w, layout, 1); // loads and compiles what the run needs
        // the median of three: one run's figure can be off either way (memory the allocator still held at the
        // start and returned during the run reads low; late compilation reads high)
        long[] peaks = new long[3];
        for (int i = 0; i < peaks.length; i++) {
            System.gc();
            long before = NativePeak.resident();
            long jvmBefore = NativePeak.jvmCommitted();
            NativePeak.reset();
            run(w, layout, 2);
            long jvmGrowth = NativePeak.jvmCommitted() - jvmBefore;
            peaks[i] = NativePeak.peak() - before - Math.max(0, jvmGrowth);
        }
        java.util.Arrays.sort(peaks);
        return peaks[1];
    }

    static Workload workload(TransformerConfig model, int seq, long globalBatch, OptimizerConfig opt) {
        return new Workload(model, seq, globalBatch, 128, opt, AttentionBackend.AUTO);
    }

    /**
     * The memory model's peak against the measured one for one case.
     *
     * @param name the case's name
     * @param measured bytes measured ({@link #measure})
     * @param estimated bytes the memory model estimates over the layout's ranks
     */
    record Peak(String name, long measured, long estimated) {
        double error() {
            return estimated / (double) measured - 1;
        }

        String line() {
            return String.format(Locale.ROOT, "%-36s measured %6.1f MB, estimated %6.1f MB (%+.1f%%)", name,
                    measured / 1e6, estimated / 1e6, 100 * error());
        }
    }

    /** @return the peaks of a GPT workload (sequence 256, global batch 8, fp32) trained at a layout */
    static Peak peak(String name, TransformerConfig model, Layout layout, Calibration cal) {
        Workload w = workload(model, 256, 8, fp32());
        long estimated = MemoryModel.estimate(w, layout, cal).total() * layout.worldSize();
        return new Peak(name, measure(w, layout), estimated);
    }

    static OptimizerConfig fp32() {
        return OptimizerConfig.builder().precision(Precision.FP32).build();
    }
}
