package io.mcore4j.training.metrics;

import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import com.google.gson.Strictness;
import com.google.gson.stream.JsonReader;
import java.io.IOException;
import java.io.StringReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Writes each logged iteration as one JSON object per line ({@code {"iteration": 10, "lm loss": 4.21,
 * ...}}, Megatron's names as keys, NaN as {@code null}) through Gson. One run per file: at
 * {@link #begin} a fresh run (start 0) moves another run's records aside to {@code FILE.1},
 * {@code FILE.2}, ... and a resumed run keeps the records up to its start and appends after them.
 * Each line is flushed as written, so a crash loses at most the line being written.
 */
public final class JsonlMetricsSink extends AppendingFileSink {
    private final Path file;

    /**
     * @param file the JSON Lines file; its folder is created if needed
     */
    public JsonlMetricsSink(Path file) {
        super("metrics file");
        this.file = file;
    }

    /** @return the file this sink writes */
    public Path file() {
        return file;
    }

    @Override
    public void begin(long startIteration, long trainIterations) {
        try {
            Path dir = file.toAbsolutePath().getParent();
            if (dir != null) {
                Files.createDirectories(dir);
            }
            if (Files.exists(file) && Files.size(file) > 0) {
                if (startIteration == 0) {
                    int n = 1;
                    while (Files.exists(file.resolveSibling(file.getFileName() + "." + n))) {
                        n++;
                    }
                    Files.move(file, file.resolveSibling(file.getFileName() + "." + n));
                } else {
                    keepUpTo(startIteration);
                }
            }
            open(file, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot open metrics file " + file, e);
        }
    }

    /** Drops the records past {@code start} (a resumed run repeats the iterations after its checkpoint). */
    private void keepUpTo(long start) throws IOException {
        List<String> kept = new ArrayList<>();
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            if (!line.isBlank() && parse(line, file).getOrDefault("iteration", 0.0) <= start) {
                kept.add(line);
            }
        }
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.write(tmp, kept, StandardCharsets.UTF_8);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    @Override
    public void write(long iteration, Map<String, Double> scalars) {
        if (!isOpen()) {
            begin(iteration - 1, iteration);
        }
        JsonObject o = new JsonObject();
        o.addProperty("iteration", iteration);
        for (Map.Entry<String, Double> e : scalars.entrySet()) {
            Double v = e.getValue();
            if (v == null || !Double.isFinite(v)) {
                o.add(e.getKey(), com.google.gson.JsonNull.INSTANCE);
            } else {
                o.addProperty(e.getKey(), v);
            }
        }
        byte[] line = (o + "\n").getBytes(StandardCharsets.UTF_8);
        append(out -> out.write(line));
    }

    /**
     * Reads a metrics file back.
     *
     * @param file a file this sink wrote
     * @return one map per line, in file order: {@code "iteration"} and every scalar (null as NaN)
     * @throws UncheckedIOException if the file cannot be read
     * @throws IllegalArgumentException naming the line that is not a JSON object of numbers
     */
    public static List<Map<String, Double>> read(Path file) {
        List<Map<String, Double>> records = new ArrayList<>();
        try {
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                if (!line.isBlank()) {
                    records.add(parse(line, file));
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read metrics file " + file, e);
        }
        return records;
    }

    private static Map<String, Double> parse(String line, Path file) {
        Map<String, Double> record = new LinkedHashMap<>();
        try {
            JsonReader reader = new JsonReader(new StringReader(line));
            reader.setStrictness(Strictness.STRICT);
            JsonObject o = JsonParser.parseReader(reader).getAsJsonObject();
            o.entrySet().forEach(e -> record.put(e.getKey(),
                    e.getValue().isJsonNull() ? Double.NaN : e.getValue().getAsDouble()));
        } catch (JsonParseException | IllegalStateException | UnsupportedOperationException | NumberFormatException e) {
            throw new IllegalArgumentException("metrics file " + file + ": not a JSON object of numbers: " + line, e);
        }
        return record;
    }
}
