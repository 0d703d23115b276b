package io.mcore4j.planner;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonParseException;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The measured constants of the time model, for one kind of GPU, read from JSON. The GPU benchmark
 * ({@code GptBenchmark --calibration-out FILE}) writes one from a run: the matmul efficiency of the
 * run's shape from its forward+backward time, and the optimizer and gradient-copy cost per parameter
 * from its phases; the coefficients that need several GPUs (TP's serial share, the data-parallel
 * sync factor) are carried over from the calibration it started from. {@code h200.json} and
 * {@code h100.json} in this package are the defaults, derived from the measurements of docs/benchmarks.md (each
 * value says where it comes from).
 *
 * @param device the GPU it was measured on
 * @param memoryBandwidthGBps that GPU's memory bandwidth (optimizer times scale with the target's)
 * @param matmulEfficiency measured fractions of peak reached by a whole step's forward and backward, by shape
 * @param tensorParallelSerialFraction share of the forward+backward time at TP1 that tensor
 *     parallelism does not divide (norms, residuals, launches), from the TP2 row
 * @param optimizerSecondsPerParameter optimizer step time per parameter the rank updates
 * @param gradCopySecondsPerParameter time per parameter of copying gradients into the reduction buffers
 * @param dataParallelSyncFactor measured data-parallel sync time over the bandwidth model's all-reduce time
 * @param backwardOverlapFraction share of the backward tensor-parallel all-reduces hidden behind weight-gradient compute
 * @param contextParallelExposedFraction share of the context-parallel key/value exchange not hidden behind attention
 * @param collectiveLatencySeconds fixed cost of one collective
 * @param deviceOverheadGiB device memory in use besides tensors (CUDA context, libtorch's cache slack)
 * @param optimizerWorkspaceBytesPerParameter memory the optimizer step allocates beyond the gradients
 *     and the reduction buffers, per parameter the rank updates (0 on CUDA, whose multi-tensor Adam
 *     works in place; measured on the CPU)
 * @param notes where the numbers come from
 */
public record Calibration(String device, double memoryBandwidthGBps, List<Efficiency> matmulEfficiency,
                          double tensorParallelSerialFraction, double optimizerSecondsPerParameter,
                          double gradCopySecondsPerParameter, double dataParallelSyncFactor,
                          double backwardOverlapFraction, double contextParallelExposedFraction,
                          double collectiveLatencySeconds, double deviceOverheadGiB,
                          double optimizerWorkspaceBytesPerParameter, List<String> notes) {

    /**
     * The fraction of peak a step's forward and backward reached for one shape.
     *
     * @param hiddenSize the model's hidden size
     * @param tokensPerMicroBatch tokens of one micro-batch on one rank ({@code b x s / CP})
     * @param seqLength the sequence length measured ({@link #DEFAULT_SEQ_LENGTH} where a file names none): attention's
     *                  share of the work, and the kernels' efficiency with it, grows with the sequence, which the
     *                  tokens of a micro-batch alone do not tell (8 × 2k and 1 × 16k hold as many)
     * @param efficiency achieved FLOP/s (Megatron's formula, recompute included) over peak
     * @param source the measurement
     */
    public record Efficiency(int hiddenSize, int tokensPerMicroBatch, int seqLength, double efficiency, String source) {
        /** The sequence length of a point that names none: the length every point before long sequences was measured at. */
        public static final int DEFAULT_SEQ_LENGTH = 2048;

        /** Takes {@link #DEFAULT_SEQ_LENGTH} for a sequence length of 0 (a file's point without {@code seqLength}). */
        public Efficiency {
            if (seqLength == 0) {
                seqLength = DEFAULT_SEQ_LENGTH;
            }
        }
    }

    /**
     * Validates the values.
     *
     * @throws IllegalArgumentException naming the value out of range
     */
    public Calibration {
        if (matmulEfficiency == null || matmulEfficiency.isEmpty()) {
            throw new IllegalArgumentException("a calibration needs at least one matmulEfficiency point");
        }
        for (Efficiency e : matmulEfficiency) {
            if (!(e.efficiency() > 0 && e.efficiency() <= 1) || e.hiddenSize() < 1 || e.tokensPerMicroBatch() < 1
                    || e.seqLength() < 1) {
                throw new IllegalArgumentException("matmulEfficiency point " + e + " needs efficiency in (0, 1] and positive sizes");
            }
        }
        matmulEfficiency = List.copyOf(matmulEfficiency);
        notes = notes == null ? List.of() : List.copyOf(notes);
        fraction("tensorParallelSerialFraction", tensorParallelSerialFraction);
        fraction("backwardOverlapFraction", backwardOverlapFraction);
        fraction("contextParallelExposedFraction", contextParallelExposedFraction);
        nonNegative("optimizerSecondsPerParameter", optimizerSecondsPerParameter);
        nonNegative("gradCopySecondsPerParameter", gradCopySecondsPerParameter);
        nonNegative("collectiveLatencySeconds", collectiveLatencySeconds);
        nonNegative("deviceOverheadGiB", deviceOverheadGiB);
        nonNegative("optimizerWorkspaceBytesPerParameter", optimizerWorkspaceBytesPerParameter);
        if (!(dataParallelSyncFactor >= 1) || !(memoryBandwidthGBps > 0)) {
            throw new IllegalArgumentException("dataParallelSyncFactor " + dataParallelSyncFactor
                    + " must be >= 1 and memoryBandwidthGBps " + memoryBandwidthGBps + " positive");
        }
    }

    /**
     * The efficiency of the measured shape nearest to this one (distance in log hidden size, log
     * tokens per micro-batch and log sequence length).
     *
     * @param hiddenSize the model's hidden size
     * @param tokensPerMicroBatch tokens of one micro-batch on one rank
     * @param seqLength the whole sequence's length (not divided by context parallelism)
     * @return a fraction of peak
     */
    public double efficiency(int hiddenSize, double tokensPerMicroBatch, int seqLength) {
        Efficiency best = null;
        double bestDistance = Double.MAX_VALUE;
        for (Efficiency e : matmulEfficiency) {
            double dh = Math.log((double) hiddenSize / e.hiddenSize());
            double dt = Math.log(tokensPerMicroBatch / e.tokensPerMicroBatch());
            double ds = Math.log((double) seqLength / e.seqLength());
            double distance = dh * dh + dt * dt + ds * ds;
            if (distance < bestDistance) {
                bestDistance = distance;
                best = e;
            }
        }
        return best.efficiency();
    }

    /** @return the device memory besides tensors, bytes */
    public long deviceOverheadBytes() {
        return (long) (deviceOverheadGiB * (1L << 30));
    }

    /**
     * A default calibration shipped with the planner.
     *
     * @param name {@code h200}, {@code h100}, or {@code cpu} (memory only: the CPU's step time is not calibrated)
     * @return the calibration
     * @throws IllegalArgumentException for another name
     */
    public static Calibration builtIn(String name) {
        String resource = name.toLowerCase(Locale.ROOT) + ".json";
        try (InputStream in = Calibration.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalArgumentException("no built-in calibration \"" + name + "\"; built-in: h200, h100, cpu");
            }
            return parse(new String(in.readAllBytes(), StandardCharsets.UTF_8), "built-in " + resource);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Reads a calibration file, or a built-in one by name ({@code h200}, {@code h100}).
     *
     * @param fileOrName a JSON file, or a built-in name
     * @return the calibration
     * @throws IllegalArgumentException naming the file and what is wrong with it
     */
    public static Calibration read(String fileOrName) {
        Path file = Path.of(fileOrName);
        if (!Files.exists(file)) {
            return builtIn(fileOrName);
        }
        try {
            return parse(Files.readString(file), file.toString());
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read calibration " + file + ": " + e.getMessage(), e);
        }
    }

    private static Calibration parse(String json, String what) {
        try {
            Calibration c = new Gson().fromJson(json, Calibration.class);
            if (c == null) {
                throw new IllegalArgumentException("it is empty");
            }
            return new Calibration(c.device, c.memoryBandwidthGBps, c.matmulEfficiency, c.tensorParallelSerialFraction,
                    c.optimizerSecondsPerParameter, c.gradCopySecondsPerParameter, c.dataParallelSyncFactor,
                    c.backwardOverlapFraction, c.contextParallelExposedFraction, c.collectiveLatencySeconds,
                    c.deviceOverheadGiB, c.optimizerWorkspaceBytesPerParameter, c.notes);
        } catch (JsonParseException | IllegalArgumentException | NullPointerException e) {
            throw new IllegalArgumentException("calibration " + what + ": " + e.getMessage(), e);
        }
    }

    /**
     * This calibration with one more measured efficiency point (replacing one of the same shape).
     *
     * @param point the measured point
     * @param note where it comes from
     * @return a new calibration
     */
    public Calibration withEfficiency(Efficiency point, String note) {
        List<Efficiency> points = new ArrayList<>();
        for (Efficiency e : matmulEfficiency) {
            if (e.hiddenSize() != point.hiddenSize() || e.tokensPerMicroBatch() != point.tokensPerMicroBatch()
                    || e.seqLength() != point.seqLength()) {
                points.add(e);
            }
        }
        points.add(point);
        List<String> n = new ArrayList<>(notes);
        n.add(note);
        return new Calibration(device, memoryBandwidthGBps, points, tensorParallelSerialFraction,
                optimizerSecondsPerParameter, gradCopySecondsPerParameter, dataParallelSyncFactor,
                backwardOverlapFraction, contextParallelExposedFraction, collectiveLatencySeconds, deviceOverheadGiB,
                optimizerWorkspaceBytesPerParameter, n);
    }

    /**
     * This calibration with the per-parameter costs of the optimizer and the gradient copy replaced.
     *
     * @param optimizerSeconds optimizer step time per parameter
     * @param gradCopySeconds gradient copy time per parameter
     * @param deviceName the GPU measured
     * @param bandwidthGBps its memory bandwidth
     * @return a new calibration
     */
    public Calibration withPerParameterCosts(double optimizerSeconds, double gradCopySeconds, String deviceName,
                                             double bandwidthGBps) {
        return new Calibration(deviceName, bandwidthGBps, matmulEfficiency, tensorParallelSerialFraction,
                optimizerSeconds, gradCopySeconds, dataParallelSyncFactor, backwardOverlapFraction,
                contextParallelExposedFraction, collectiveLatencySeconds, deviceOverheadGiB,
                optimizerWorkspaceBytesPerParameter, notes);
    }

    /**
     * This calibration with another device overhead.
     *
     * @param gib device memory in use besides tensors, GiB
     * @return a new calibration
     */
    public Calibration withDeviceOverhead(double gib) {
        return new Calibration(device, memoryBandwidthGBps, matmulEfficiency, tensorParallelSerialFraction,
                optimizerSecondsPerParameter, gradCopySecondsPerParameter, dataParallelSyncFactor, backwardOverlapFraction,
                contextParallelExposedFraction, collectiveLatencySeconds, gib, optimizerWorkspaceBytesPerParameter, notes);
    }

    /** @return the JSON form */
    public String toJson() {
        return new GsonBuilder().setPrettyPrinting().create().toJson(this);
    }

    private static void fraction(String what, double v) {
        if (!(v >= 0 && v <= 1)) {
            throw new IllegalArgumentException(what + " " + v + " must be in [0, 1]");
        }
    }

    private static void nonNegative(String what, double v) {
        if (!(v >= 0) || Double.isInfinite(v)) {
            throw new IllegalArgumentException(what + " " + v + " must be finite and >= 0");
        }
    }
}
