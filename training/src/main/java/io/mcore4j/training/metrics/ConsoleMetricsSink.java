package io.mcore4j.training.metrics;

import io.mcore4j.data.progress.ProgressBar;
import java.io.PrintStream;
import java.util.Map;

/**
 * Prints each logged iteration as one line of Megatron-named scalars with four significant digits
 * ({@code iteration 20/120 | lm loss 3.912 | learning-rate 0.003 | ...}), MFU only when the device's
 * peak is known, and on an interactive terminal keeps one progress bar below the lines
 * ({@link ProgressBar}); when the output is not a terminal (a pipe, a file, Maven's exec) only the
 * plain lines appear.
 */
public final class ConsoleMetricsSink implements MetricsSink {
    private final PrintStream out;
    private final Double peakTflops;
    private final ProgressBar bar;
    private long trainIterations;

    /**
     * @param out where lines go
     * @param peakTflops the device's peak TFLOP/s for MFU, or null when unknown (no MFU is printed)
     * @param terminal whether {@code out} is an interactive terminal (usually {@code System.console() != null})
     */
    public ConsoleMetricsSink(PrintStream out, Double peakTflops, boolean terminal) {
        this.out = out;
        this.peakTflops = peakTflops;
        this.bar = terminal ? new ProgressBar(out, "iterations", 200_000_000L) : null;
    }

    /**
     * A sink on {@code System.out} that draws the bar only when the JVM has a console.
     *
     * @param peakTflops the device's peak TFLOP/s, or null
     * @return the sink
     */
    public static ConsoleMetricsSink onStandardOutput(Double peakTflops) {
        return new ConsoleMetricsSink(System.out, peakTflops, System.console() != null);
    }

    @Override
    public void begin(long startIteration, long trainIterations) {
        this.trainIterations = trainIterations;
    }

    @Override
    public void write(long iteration, Map<String, Double> scalars) {
        if (bar != null) {
            bar.clear();
        }
        out.println(line(iteration, trainIterations, scalars, peakTflops));
        if (bar != null) {
            bar.redraw();
        }
    }

    @Override
    public void iterationDone(long iteration, long trainIterations) {
        if (bar != null) {
            bar.update(iteration, trainIterations, "");
        }
    }

    @Override
    public void close() {
        if (bar != null) {
            bar.clear();
        }
        out.flush();
    }

    /**
     * The log line of one iteration.
     *
     * @param iteration the iteration
     * @param trainIterations the run's last iteration, or 0 when unknown
     * @param scalars Megatron-named values
     * @param peakTflops the device's peak, or null: then no MFU
     * @return the line, without a newline
     */
    public static String line(long iteration, long trainIterations, Map<String, Double> scalars, Double peakTflops) {
        StringBuilder b = new StringBuilder(" iteration ").append(iteration);
        if (trainIterations > 0) {
            b.append('/').append(trainIterations);
        }
        for (Map.Entry<String, Double> e : scalars.entrySet()) {
            if (e.getValue() == null) {
                continue;
            }
            b.append(" | ").append(e.getKey()).append(' ').append(MetricFormat.significant(e.getValue(), 4));
            if (e.getKey().equals(MetricNames.TFLOPS_PER_RANK) && peakTflops != null && peakTflops > 0) {
                b.append(" | MFU ").append(MetricFormat.significant(100 * e.getValue() / peakTflops, 3)).append('%');
            }
        }
        return b.toString();
    }
}
