package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.index.NDIndex;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The router's auxiliary-loss values for logging, as Megatron-Core's {@code MoEMetricsTracker} keeps them:
 * each router {@link #record records} its loss divided by its coefficient ({@code load_balancing_loss},
 * {@code seq_load_balancing_loss}, {@code global_load_balancing_loss}, {@code z_loss}) per layer and
 * micro-batch during forward, summed until the training loop calls {@link #report} (once per logged window: the
 * report reads the values on the host, which waits for the device), which reduces them over ranks, scales them by
 * {@code 1 / micro-batches} (so a window's report is the sum of its steps' values), averages them over the MoE layers
 * and clears them.
 *
 * <p>Each (loss, layer) sums into one float32 accumulator of its own, made at its first record and kept until
 * {@link #close}: records add into it in place and {@link #clear} zeroes it in place, so a CUDA graph that captured
 * the records keeps adding into the tensors the reports read.
 *
 * <p>Owns a native-memory scope for the accumulators; {@link #close} frees it. One tracker per
 * rank, shared by the MoE layers of that rank (attach it with {@link TopKRouter#trackAuxLosses}); not
 * thread-safe and never static. {@link #report} is collective over the groups named by each loss's
 * {@link Reduction} and over the pipeline group: every rank of them must call it, in the same order.
 */
public final class MoeAuxLossTracker implements AutoCloseable {
    /** How a loss's per-layer values are combined over ranks before logging (Megatron's groups). */
    public enum Reduction {
        /** Sum over TP x CP (each rank holds its tokens' share), then average over DP: the (sequence) aux loss. */
        SUM_TP_CP,
        /** Sum over TP x DP x CP, no DP average: the global aux loss. */
        SUM_TP_DP_CP,
        /** Average over TP x DP x CP, then over DP: the z-loss. */
        AVERAGE_TP_DP_CP
    }

    /**
     * What {@link #report} returns.
     *
     * @param averages per loss name, the sum over layers divided by the number of MoE layers (the logged value)
     * @param perLayer per loss name, the value of each layer (index {@code layerNumber - 1}), for
     *                 {@code --moe-per-layer-logging}
     */
    public record Report(Map<String, Double> averages, Map<String, double[]> perLayer) {
        /** Copies the maps. */
        public Report {
            averages = Collections.unmodifiableMap(new LinkedHashMap<>(averages));
            perLayer = Collections.unmodifiableMap(new LinkedHashMap<>(perLayer));
        }

        /**
         * Megatron's console form: {@code " load_balancing_loss: 1.000121E+00 | z_loss: ..."}, in recording order.
         *
         * @return the text, empty when nothing was recorded
         */
        public String format() {
            StringBuilder out = new StringBuilder();
            averages.forEach((name, value) -> out.append(String.format(java.util.Locale.ROOT, " %s: %.6E |", name, value)));
            return out.toString();
        }
    }

    private static final class Entry {
        final NDArray[] values;
        Reduction reduction;

        Entry(int numLayers) {
            values = new NDArray[numLayers];
        }
    }

    private final NDManager manager;
    private final Map<String, Entry> entries = new LinkedHashMap<>();

    /**
     * @param parent manager under which the tracker opens its own scope (for example the model's)
     */
    public MoeAuxLossTracker(NDManager parent) {
        this.manager = Objects.requireNonNull(parent, "parent").newSubManager();
    }

    /**
     * Makes sure a loss is reported even on a rank whose layers record nothing (a pipeline stage without MoE
     * layers, Megatron's {@code force_initialize}): {@link #report} all-reduces the same losses, in the same
     * order, on every rank, so every rank declares the model's losses up front, in the same order.
     *
     * @param name the loss name
     * @param numLayers layers of the model
     * @param reduction how the value is combined over ranks
     * @throws IllegalArgumentException if the name is known with another size or reduction
     */
    public void expect(String name, int numLayers, Reduction reduction) {
        Objects.requireNonNull(reduction, "reduction");
        if (numLayers < 1) {
            throw new IllegalArgumentException("a model of " + numLayers + " layers for " + name);
        }
        Entry entry = entries.computeIfAbsent(Objects.requireNonNull(name, "name"), n -> new Entry(numLayers));
        if (entry.values.length != numLayers || (entry.reduction != null && entry.reduction != reduction)) {
            throw new IllegalArgumentException(name + " is known for " + entry.values.length + " layers with reduction "
                    + entry.reduction + ", not " + numLayers + " with " + reduction);
        }
        entry.reduction = reduction;
    }

    /**
     * Adds one layer's value for the current step (summed over micro-batches until {@link #report}).
     *
     * @param name the loss name, e.g. {@code "load_balancing_loss"}
     * @param layerNumber 1-based layer number
     * @param numLayers layers of the model (the size of the per-layer vector; the same for every call)
     * @param value a scalar; it is copied without its graph
     * @param reduction how the value is combined over ranks
     * @throws IllegalArgumentException if the layer number is out of range, or the size or reduction differ from
     *     earlier calls for the same name
     */
    public void record(String name, int layerNumber, int numLayers, NDArray value, Reduction reduction) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(reduction, "reduction");
        if (numLayers < 1 || layerNumber < 1 || layerNumber > numLayers) {
            throw new IllegalArgumentException("layer number " + layerNumber + " of " + numLayers + " layers for "
                    + name + ": expected 1.." + numLayers);
        }
        Entry entry = entries.computeIfAbsent(name, n -> new Entry(numLayers));
        if (entry.values.length != numLayers) {
            throw new IllegalArgumentException(name + " was recorded for " + entry.values.length + " layers, now for " + numLayers);
        }
        if (entry.reduction != null && entry.reduction != reduction) {
            throw new IllegalArgumentException(name + " was recorded with reduction " + entry.reduction + ", now " + reduction);
        }
        entry.reduction = reduction;
        NDArray accumulator = entry.values[layerNumber - 1];
        if (accumulator == null) {
            accumulator = manager.zeros(value.getShape(), DataType.FLOAT32, value.getDevice());
            entry.values[layerNumber - 1] = accumulator;
        }
        try (NDManager temp = manager.newSubManager(value.getDevice())) {
            accumulator.addi(Tensors.own(value.stopGradient().toType(DataType.FLOAT32, false), temp));
        }
    }

    /**
     * Reduces, scales, averages and clears the recorded values (Megatron's {@code report}): per loss, the
     * per-layer sums are all-reduced over the pipeline group (sum), then as the loss's {@link Reduction}
     * says, multiplied by {@code lossScale}, and averaged over {@code numMoeLayers}.
     *
     * @param lossScale usually {@code 1 / micro-batches per step}
     * @param numMoeLayers the MoE layers of the whole model, at least 1
     * @param groups this rank's groups (pipeline, TP, CP, DP, TP x DP)
     * @return the values to log; losses never recorded on any rank of this tracker are absent
     * @throws IllegalArgumentException if {@code numMoeLayers} is below 1
     */
    public Report report(double lossScale, int numMoeLayers, ProcessGroups groups) {
        if (numMoeLayers < 1) {
            throw new IllegalArgumentException("MoE metrics need at least one MoE layer, got " + numMoeLayers);
        }
        Map<String, Double> averages = new LinkedHashMap<>();
        Map<String, double[]> perLayer = new LinkedHashMap<>();
        try (NDManager temp = manager.newSubManager()) {
            for (Map.Entry<String, Entry> e : entries.entrySet()) {
                Entry entry = e.getValue();
                NDArray v = reduce(groups.pp(), perLayer(entry, temp), ReduceOp.SUM, temp);
                switch (entry.reduction) {
                    case SUM_TP_CP -> v = reduce(groups.dp(), reduce(groups.cp(), reduce(groups.tp(), v, ReduceOp.SUM, temp),
                            ReduceOp.SUM, temp), ReduceOp.AVG, temp);
                    case SUM_TP_DP_CP -> v = reduce(groups.cp(), reduce(groups.tpDp(), v, ReduceOp.SUM, temp), ReduceOp.SUM, temp);
                    case AVERAGE_TP_DP_CP -> v = reduce(groups.dp(), reduce(groups.cp(), reduce(groups.tpDp(), v, ReduceOp.AVG, temp),
                            ReduceOp.AVG, temp), ReduceOp.AVG, temp);
                }
                float[] reduced = v.toFloatArray();
                double[] scaled = new double[reduced.length];
                double sum = 0;
                for (int l = 0; l < scaled.length; l++) {
                    scaled[l] = reduced[l] * lossScale;
                    sum += scaled[l];
                }
                averages.put(e.getKey(), sum / numMoeLayers);
                perLayer.put(e.getKey(), scaled);
            }
        }
        clear();
        return new Report(averages, perLayer);
    }

    /**
     * The entry's values as one float32 {@code [layers]} tensor on their device (zero for layers that recorded
     * nothing), made without reading them on the host: a read per layer would wait for the device each time.
     */
    private NDArray perLayer(Entry entry, NDManager owner) {
        NDArray first = null;
        for (NDArray v : entry.values) {
            if (v != null) {
                first = v;
                break;
            }
        }
        if (first == null) {
            return owner.zeros(new Shape(entry.values.length), DataType.FLOAT32);
        }
        NDArray zero = owner.zeros(new Shape(), DataType.FLOAT32, first.getDevice());
        NDList layers = new NDList(entry.values.length);
        for (NDArray v : entry.values) {
            layers.add(v == null ? zero : v.getShape().dimension() == 0 ? v : Tensors.own(v.reshape(new Shape()), owner));
        }
        NDArray stacked = NDArrays.stack(layers);
        stacked.attach(owner);
        return stacked;
    }

    /**
     * Drops the values recorded since the last report (Megatron's {@code clear}): zeroes the accumulators in place;
     * the names stay known.
     */
    public void clear() {
        try (NDManager temp = manager.newSubManager()) {
            for (Entry entry : entries.values()) {
                for (NDArray accumulator : entry.values) {
                    if (accumulator != null) {
                        // a fill from a device scalar, not a product: a NaN recorded once would survive a product with 0
                        accumulator.set(new NDIndex("..."), Tensors.scalar(0, accumulator, temp));
                    }
                }
            }
        }
    }

    /**
     * The accumulator of one (loss, layer), for tests of the in-place contract.
     *
     * @return the tensor the records add into, or null before the first record
     */
    NDArray accumulator(String name, int layerNumber) {
        Entry entry = entries.get(name);
        return entry == null ? null : entry.values[layerNumber - 1];
    }

    /**
     * The values recorded since the last report, summed over micro-batches, on this rank only.
     *
     * @param name a loss name
     * @return a copy per layer (0 where nothing was recorded), or an empty array for an unknown name
     */
    public double[] localValues(String name) {
        Entry entry = entries.get(name);
        if (entry == null) {
            return new double[0];
        }
        double[] out = new double[entry.values.length];
        for (int l = 0; l < out.length; l++) {
            out[l] = entry.values[l] == null ? 0 : entry.values[l].getFloat();
        }
        return out;
    }

    private static NDArray reduce(Communicator c, NDArray x, ReduceOp op, NDManager owner) {
        return c.size() == 1 ? x : c.allReduce(x, op, owner);
    }

    /** Frees the recorded values. */
    @Override
    public void close() {
        manager.close();
    }

    @Override
    public String toString() {
        return "MoeAuxLossTracker" + Arrays.toString(entries.keySet().toArray());
    }
}
