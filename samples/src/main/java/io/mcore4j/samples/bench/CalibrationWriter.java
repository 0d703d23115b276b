package io.mcore4j.samples.bench;

import io.mcore4j.planner.Calibration;
import io.mcore4j.planner.ClusterSpec;
import io.mcore4j.planner.Layout;
import io.mcore4j.planner.MemoryModel;
import io.mcore4j.planner.ParameterInventory;
import io.mcore4j.planner.TimeEstimate;
import io.mcore4j.planner.TimeModel;
import io.mcore4j.planner.Workload;

import java.util.Locale;

/**
 * Turns a one-GPU benchmark run into a planner calibration ({@code GptBenchmark --calibration-out}):
 * the run's matmul efficiency (its forward+backward time against the FLOPs the time model counts for
 * it), with {@code --phases} the optimizer's and the gradient copy's cost per parameter, and the
 * device memory the memory model does not count (the measured peak less the model's tensors). The
 * multi-GPU coefficients are the base calibration's.
 */
final class CalibrationWriter {
    private CalibrationWriter() {}

    /**
     * @param base the calibration to start from
     * @param w the run's workload
     * @param layout the run's layout (one GPU)
     * @param device the GPU's name
     * @param stepSeconds measured seconds per step
     * @param forwardBackwardSeconds measured forward+backward seconds per step, or NaN without phases
     * @param optimizerSeconds optimizer step seconds per step, or NaN
     * @param gradCopySeconds gradient sync and zero-grad seconds per step, or NaN
     * @param peakGiB the measured device memory peak
     * @return the new calibration
     * @throws IllegalArgumentException for a run on more than one GPU
     */
    static Calibration calibrate(Calibration base, Workload w, Layout layout, String device, double stepSeconds,
                                 double forwardBackwardSeconds, double optimizerSeconds, double gradCopySeconds,
                                 double peakGiB) {
        if (layout.worldSize() != 1) {
            throw new IllegalArgumentException("--calibration-out needs a one-GPU run, got " + layout.name());
        }
        ClusterSpec one = new ClusterSpec(1, 1, 1000, 989, base.memoryBandwidthGBps(), 300, 45);
        var tensors = ParameterInventory.stage(w.modelFor(layout), layout, 0);
        long params = ParameterInventory.numel(tensors, false) + ParameterInventory.numel(tensors, true);
        Calibration c = base;
        if (!Double.isNaN(optimizerSeconds) && !Double.isNaN(gradCopySeconds)) {
            c = c.withPerParameterCosts(optimizerSeconds / params, gradCopySeconds / params, device, base.memoryBandwidthGBps());
        }
        TimeEstimate modelled = TimeModel.estimate(w, layout, one, c);
        double computeSeconds = !Double.isNaN(forwardBackwardSeconds) ? forwardBackwardSeconds
                : stepSeconds - modelled.optimizer();
        int hidden = w.model().hiddenSize();
        int tokens = layout.microBatchSize() * w.seqLength();
        double efficiency = c.efficiency(hidden, tokens, w.seqLength()) * modelled.compute() / computeSeconds;
        c = c.withEfficiency(new Calibration.Efficiency(hidden, tokens, w.seqLength(), efficiency, String.format(Locale.ROOT,
                "gpt-benchmark on %s: %s, %.1f ms per step (forward+backward %.1f ms)", device, layout.name(),
                1000 * stepSeconds, 1000 * computeSeconds)), "efficiency point measured by gpt-benchmark on " + device);
        if (peakGiB > 0) {
            double counted = (MemoryModel.estimate(w, layout, c).total() - c.deviceOverheadBytes()) / (double) (1L << 30);
            c = c.withDeviceOverhead(Math.max(0, peakGiB - counted));
        }
        return c;
    }
}
