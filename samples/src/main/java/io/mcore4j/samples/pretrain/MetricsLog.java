package io.mcore4j.samples.pretrain;

import java.io.BufferedWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;

/**
 * Training metrics of one run: a JSONL file with one object per logged iteration (appended, so a
 * resumed run continues the same file) and, at the end, a PNG loss curve drawn with Java2D.
 */
final class MetricsLog implements AutoCloseable {
    private final Path directory;
    private final BufferedWriter jsonl;
    private final List<double[]> trainLoss = new ArrayList<>();
    private final List<double[]> validLoss = new ArrayList<>();

    MetricsLog(Path directory) {
        this.directory = directory;
        try {
            Files.createDirectories(directory);
            Path file = directory.resolve("metrics.jsonl");
            for (String line : Files.exists(file) ? Files.readAllLines(file) : List.<String>of()) {
                double it = field(line, "iteration");
                if (line.contains("\"valid_loss\"")) {
                    validLoss.add(new double[] {it, field(line, "valid_loss")});
                } else if (line.contains("\"loss\"")) {
                    trainLoss.add(new double[] {it, field(line, "loss")});
                }
            }
            this.jsonl = Files.newBufferedWriter(file, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot open metrics in " + directory, e);
        }
    }

    /** Appends one JSON object built from alternating names and numeric values. */
    void record(Object... namesAndValues) {
        StringBuilder b = new StringBuilder("{");
        for (int i = 0; i < namesAndValues.length; i += 2) {
            b.append(i == 0 ? "" : ", ").append('"').append(namesAndValues[i]).append("\": ");
            Object value = namesAndValues[i + 1];
            if (value instanceof Double d) {
                b.append(Double.isFinite(d) ? String.format(java.util.Locale.ROOT, "%.6g", d) : "null");
            } else {
                b.append(value);
            }
        }
        String line = b.append('}').toString();
        double it = field(line, "iteration");
        if (line.contains("\"valid_loss\"")) {
            validLoss.add(new double[] {it, field(line, "valid_loss")});
        } else if (line.contains("\"loss\"")) {
            trainLoss.add(new double[] {it, field(line, "loss")});
        }
        try {
            jsonl.write(line);
            jsonl.newLine();
            jsonl.flush();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Draws the loss curve, if this runtime has Java2D (a trimmed runtime without the
     * {@code java.desktop} module has not: then the JSONL file is the only record, and it says so).
     *
     * @return where the PNG went, or null without Java2D
     */
    Path writeLossCurve() {
        if (ModuleLayer.boot().findModule("java.desktop").isEmpty()) {
            return null;
        }
        return drawLossCurve();
    }

    private Path drawLossCurve() {
        Path out = directory.resolve("loss.png");
        LossCurve.draw(trainLoss, validLoss, out);
        return out;
    }

    private static double field(String line, String name) {
        int i = line.indexOf("\"" + name + "\": ");
        if (i < 0) {
            return Double.NaN;
        }
        int start = i + name.length() + 4;
        int end = start;
        while (end < line.length() && ",}".indexOf(line.charAt(end)) < 0) {
            end++;
        }
        String text = line.substring(start, end).trim();
        return text.equals("null") ? Double.NaN : Double.parseDouble(text);
    }

    @Override
    public void close() {
        try {
            jsonl.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
