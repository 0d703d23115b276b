package io.mcore4j.training.metrics;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Draws the run's loss curve as a PNG when closed: training loss ({@link MetricNames#LOSS}) and
 * validation loss ({@link MetricNames#VALID_LOSS}) against the iteration, with nice ticks, axis
 * labels and a grid. Given the run's JSON Lines file, it draws from that file at close, so a resumed
 * run's curve starts at iteration 1 too. Runtimes without the {@code java.desktop} module (trimmed
 * runtimes on GPU hosts) draw nothing; {@link #drawn()} then says so.
 */
public final class LossCurveSink implements MetricsSink {
    private final Path png;
    private final Path jsonl;
    private final String title;
    private final List<double[]> train = new ArrayList<>();
    private final List<double[]> valid = new ArrayList<>();
    private boolean drawn;
    private String failure;

    /**
     * @param png the image to write
     * @param jsonl the run's metrics file written by a {@link JsonlMetricsSink} (read at close, after
     *     that sink has closed), or null to draw the iterations this sink saw
     * @param title the caption above the plot
     */
    public LossCurveSink(Path png, Path jsonl, String title) {
        this.png = png;
        this.jsonl = jsonl;
        this.title = title;
    }

    @Override
    public void write(long iteration, Map<String, Double> scalars) {
        add(iteration, scalars);
    }

    private void add(double iteration, Map<String, Double> scalars) {
        Double loss = scalars.get(MetricNames.LOSS);
        if (loss != null) {
            train.add(new double[] {iteration, loss});
        }
        Double v = scalars.get(MetricNames.VALID_LOSS);
        if (v != null) {
            valid.add(new double[] {iteration, v});
        }
    }

    /** @return whether the last {@link #close()} wrote the PNG */
    public boolean drawn() {
        return drawn;
    }

    /** @return why the last {@link #close()} drew nothing (no Java2D, no fonts, ...), or null */
    public String failure() {
        return failure;
    }

    /** @return the image this sink writes */
    public Path png() {
        return png;
    }

    @Override
    public void close() {
        if (jsonl != null && java.nio.file.Files.exists(jsonl)) {
            train.clear();
            valid.clear();
            for (Map<String, Double> r : JsonlMetricsSink.read(jsonl)) {
                add(r.getOrDefault("iteration", Double.NaN), r);
            }
        }
        drawn = false;
        failure = null;
        if (ModuleLayer.boot().findModule("java.desktop").isEmpty()) {
            failure = "this Java runtime has no java.desktop module";
        } else if (!train.isEmpty() || !valid.isEmpty()) {
            try {
                LossCurvePlot.draw(title, train, valid, png);
                drawn = true;
            } catch (RuntimeException | Error e) {
                // e.g. a runtime with Java2D but no fonts: the metrics are kept, the picture is not
                failure = String.valueOf(e.getMessage());
            }
        }
    }
}
