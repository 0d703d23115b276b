package io.mcore4j.core.fp8;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.UnaryOperator;

/**
 * The scaling state of every FP8 tensor of a model on this rank: three slots per FP8 linear (its input, its
 * weight, its output gradient), each with an amax history and a float32 scale, held as three device tensors
 * ({@code history [amaxHistoryLen, slots]}, {@code scale} and {@code scaleInv}, each {@code [slots, 4]} with
 * slot {@code i}'s value at {@code [i, 0]}) so that a step never waits for the device. The scale buffers give
 * every slot 16 bytes: a GEMM takes its operands' inverse scales as 0-dim views into them, and cuBLASLt refuses
 * ({@code CUBLAS_STATUS_NOT_SUPPORTED}) scale pointers that are not 16-byte aligned.
 *
 * <p><b>Delayed scaling</b> (Transformer Engine's recipe, {@link Fp8Recipe#DELAYED}). A cast in step {@code k}
 * uses its slot's scale, computed from the histories up to step {@code k-1}, and records the tensor's amax
 * ({@code max|x|}, a running maximum over the step's casts) in {@code history[0, slot]}. {@link #update} ends
 * the step: the current row is replaced by its maximum over the ranks of the amax reduction; the amax is the
 * history's maximum ({@link AmaxComputeAlgo#MAX}; a NaN wins) or its current row
 * ({@link AmaxComputeAlgo#MOST_RECENT}); the history rolls by one (the current row becomes the newest past one,
 * the oldest is dropped) and the current row is zeroed; {@code scale = fp8_max / amax / 2^margin} where
 * {@code amax > 0} and finite, the previous scale otherwise, the largest float32 where the quotient overflows;
 * {@code scaleInv = 1 / scale}. Scales start at 1. {@code fp8_max} is 448 for e4m3 slots, 57344 for e5m2 (the
 * output gradients under {@link Fp8Format#HYBRID}). Transformer Engine updates the forward slots after every
 * forward pass and the backward slots after every backward pass; mcore4j updates all of them once per
 * optimizer step (the same with one micro-batch per step; with more, the step's casts share one scale).
 *
 * <p><b>Tensorwise</b> ({@link Fp8Recipe#TENSORWISE}): each cast computes its own scale; the state holds no
 * history that matters, and {@link #update} only starts a new weight generation.
 *
 * <p>Slots are registered while the model is built ({@link #register}); the tensors are allocated on the first
 * use, after which registering is refused. {@link #generation()} is the version of the weights' values: it moves
 * at each {@link #update} (the optimizer wrote the weights) and each {@link #loadShardedState} (a checkpoint was
 * written into them), and FP8 linears cast their weight again when it moved. Owns its tensors (in the manager given
 * to the constructor, which picks the device) and closes them in {@link #close()}. Not thread-safe: used by the
 * thread that trains the model.
 */
public final class Fp8Scaling implements AutoCloseable {
    /** Which tensor of a linear a slot scales. */
    public enum Role { INPUT, WEIGHT, GRAD_OUTPUT }

    /**
     * The three slots of one linear.
     *
     * @param input the forward input's slot
     * @param weight the weight's slot
     * @param gradOutput the output gradient's slot
     */
    public record Slots(int input, int weight, int gradOutput) {}

    /** Floats per slot in the scale buffers: 16 bytes, the alignment cuBLASLt needs of a scale pointer. */
    static final int SCALE_STRIDE = 4;

    private final Fp8Config config;
    private final NDManager manager;
    private final List<String> names = new ArrayList<>();
    private NDArray history;
    private NDArray scaleBuffer;
    private NDArray scaleInvBuffer;
    private NDArray scale;
    private NDArray scaleInv;
    private NDArray fp8Max;
    private NDArray updateConfig;
    private NDArray[] slotViews;
    private long generation;
    private long weightCasts;

    /**
     * @param config the FP8 settings
     * @param manager the long-lived manager that owns the state, on the model's device
     */
    public Fp8Scaling(Fp8Config config, NDManager manager) {
        this.config = Objects.requireNonNull(config, "config");
        this.manager = manager.newSubManager();
        this.manager.setName("fp8-scaling");
    }

    /** @return the FP8 settings */
    public Fp8Config config() {
        return config;
    }

    /**
     * Registers one linear's three slots.
     *
     * @param linear the linear's name, unique in this state (it names the slots in checkpoints)
     * @return its slots
     * @throws IllegalStateException if the state is already allocated
     * @throws IllegalArgumentException if the name is taken
     */
    public Slots register(String linear) {
        if (history != null) {
            throw new IllegalStateException("FP8 linear " + linear + " registered after the scaling state was allocated"
                    + " (" + names.size() / 3 + " linears): build every linear before the first step");
        }
        for (Role r : Role.values()) {
            if (names.contains(slotName(linear, r))) {
                throw new IllegalArgumentException("FP8 linear " + linear + " is registered twice");
            }
        }
        int first = names.size();
        for (Role r : Role.values()) {
            names.add(slotName(linear, r));
        }
        return new Slots(first, first + 1, first + 2);
    }

    private static String slotName(String linear, Role role) {
        return linear + (linear.endsWith(".") ? "" : ".") + role.name().toLowerCase(java.util.Locale.ROOT);
    }

    /**
     * @return the slots' names ({@code <linear>.input}, {@code .weight}, {@code .grad_output}; a linear named by
     *     its key prefix, ending in a dot, gets no second dot), in slot order
     */
    public List<String> slotNames() {
        return Collections.unmodifiableList(names);
    }

    /** @return whether slot {@code slot} casts to e5m2 */
    boolean e5m2(int slot) {
        return slot % 3 == Role.GRAD_OUTPUT.ordinal() && config.format().gradientsInE5m2();
    }

    /** @return the number of updates and restores so far: a weight cast in an earlier generation is stale */
    public long generation() {
        return generation;
    }

    /**
     * How often this state's FP8 linears cast a weight to float8: once per linear and {@link #generation()} (a
     * measure of the weight cache, which micro-batches of one step share).
     *
     * @return the casts so far
     */
    public long weightCasts() {
        return weightCasts;
    }

    /** Counts one weight cast of a linear ({@link #weightCasts()}). */
    void countWeightCast() {
        weightCasts++;
    }

    /** @return {@code [amaxHistoryLen, slots]} float32, row 0 the current step's amaxes; allocated on first use */
    public NDArray history() {
        allocate();
        return history;
    }

    /** @return {@code [slots]} float32, the scales the casts of this step multiply by (a strided view) */
    public NDArray scale() {
        allocate();
        return scale;
    }

    /** @return {@code [slots]} float32, {@code 1 / scale} (a strided view) */
    public NDArray scaleInv() {
        allocate();
        return scaleInv;
    }

    /** @return {@code [slots, 4]} float32, the buffer {@link #scale()} views: what the kernels take */
    NDArray scaleBuffer() {
        allocate();
        return scaleBuffer;
    }

    /** @return {@code [slots, 4]} float32, the buffer {@link #scaleInv()} views: what the kernels take */
    NDArray scaleInvBuffer() {
        allocate();
        return scaleInvBuffer;
    }

    /**
     * Slot {@code slot}'s scale, inverse scale and current amax as one-element views into the state's tensors (the
     * fused cast reads and writes them in place), made once per slot.
     *
     * @param slot a registered slot
     * @return {@code {scale, scaleInv, amax}}: 0-dim float32 views of {@code scale[slot, 0]},
     *     {@code scaleInv[slot, 0]} (16-byte aligned) and {@code history[0, slot]}
     */
    NDArray[] slotViews(int slot) {
        allocate();
        if (slotViews[3 * slot] == null) {
            slotViews[3 * slot] = element(scaleBuffer, slot, 0);
            slotViews[3 * slot + 1] = element(scaleInvBuffer, slot, 0);
            slotViews[3 * slot + 2] = element(history, 0, slot);
        }
        return new NDArray[] {slotViews[3 * slot], slotViews[3 * slot + 1], slotViews[3 * slot + 2]};
    }

    /** @return the 0-dim view of {@code t[row, col]}, owned by the state */
    private NDArray element(NDArray t, long row, long col) {
        NDArray view = Tensors.narrow(Tensors.narrow(t, 0, row, row + 1), 1, col, col + 1).reshape(new Shape());
        view.attach(manager);
        return view;
    }

    private void allocate() {
        if (history != null) {
            return;
        }
        if (names.isEmpty()) {
            throw new IllegalStateException("no FP8 linear was registered");
        }
        int n = names.size();
        history = manager.zeros(new Shape(config.amaxHistoryLen(), n), DataType.FLOAT32);
        scaleBuffer = manager.ones(new Shape(n, SCALE_STRIDE), DataType.FLOAT32);
        scaleInvBuffer = manager.ones(new Shape(n, SCALE_STRIDE), DataType.FLOAT32);
        scale = Tensors.narrow(scaleBuffer, 1, 0, 1).reshape(n);
        scaleInv = Tensors.narrow(scaleInvBuffer, 1, 0, 1).reshape(n);
        float[] max = new float[n];
        for (int i = 0; i < n; i++) {
            max[i] = (float) (e5m2(i) ? Fp8Format.E5M2_MAX : Fp8Format.E4M3_MAX);
        }
        fp8Max = manager.create(max);
        slotViews = new NDArray[3 * n];
        NDManager host = manager.newSubManager(ai.djl.Device.cpu());
        updateConfig = host.create(new long[] {config.margin(), config.amaxComputeAlgo() == AmaxComputeAlgo.MAX ? 1 : 0});
        updateConfig.attach(manager);
        host.close();
    }

    /**
     * Ends a step: under delayed scaling, reduces the current amaxes over the ranks and computes the next scales
     * (the class comment's rule); under either recipe, starts a new weight generation. Call it once per optimizer
     * step, after the optimizer changed the weights, on every rank of the amax reduction.
     *
     * @param reduceMax the element-wise maximum over the ranks that must share scales (the tensor- and
     *     data-parallel ranks of this model chunk); receives a new {@code [slots]} tensor it may modify and
     *     returns the reduced tensor; the identity on one rank
     */
    public void update(UnaryOperator<NDArray> reduceMax) {
        generation++;
        if (config.recipe() != Fp8Recipe.DELAYED || names.isEmpty()) {
            return;
        }
        allocate();
        try (NDManager temp = manager.newSubManager()) {
            NDArray current = history.get(0).duplicate();
            current.attach(temp);
            NDArray reduced = reduceMax.apply(current);
            Fp8Kernels.get().update(history, scaleBuffer, scaleInvBuffer, fp8Max, reduced, updateConfig);
        }
    }

    /**
     * The state to checkpoint, one pair of pieces per linear: {@code <prefix><linear>amax_history}
     * ({@code [amaxHistoryLen, 3]}, the input's, weight's and output gradient's columns) and {@code <prefix><linear>scale}
     * ({@code [3]}); the inverse scales follow from the scales. Keyed by the linears' names (their global keys), so
     * a checkpoint reshards across pipeline layouts; whole on every rank (identical over the ranks of the amax
     * reduction after {@link #update}: the caller marks the copies that are replicas).
     *
     * @param prefix prepended to every key
     * @param owner owns the pieces' tensors (copies of this state's)
     * @return the pieces; none when no linear registered
     */
    public List<ShardedTensor> shardedState(String prefix, NDManager owner) {
        List<ShardedTensor> out = new ArrayList<>();
        if (names.isEmpty()) {
            return out;
        }
        allocate();
        for (int i = 0; i < names.size() / 3; i++) {
            NDArray h = Tensors.narrow(history, 1, 3L * i, 3L * i + 3).duplicate();
            NDArray sc = Tensors.narrow(scale, 0, 3L * i, 3L * i + 3).duplicate();
            h.attach(owner);
            sc.attach(owner);
            out.add(ShardedTensor.whole(prefix + linear(i) + "amax_history", h));
            out.add(ShardedTensor.whole(prefix + linear(i) + "scale", sc));
        }
        return out;
    }

    /**
     * Restores the pieces {@link #shardedState} described, read from a checkpoint, and starts a new weight
     * generation (the float8 weights are cast again with the restored scales).
     *
     * @param prefix the prefix given to {@link #shardedState}
     * @param loaded the loaded pieces (other keys are ignored)
     * @throws IllegalArgumentException if a linear's piece is missing or of another shape (another
     *     {@code --fp8-amax-history-len})
     */
    public void loadShardedState(String prefix, List<ShardedTensor> loaded) {
        if (names.isEmpty()) {
            return;
        }
        allocate();
        Map<String, NDArray> byKey = new LinkedHashMap<>();
        for (ShardedTensor t : loaded) {
            byKey.put(t.key(), t.data());
        }
        for (int i = 0; i < names.size() / 3; i++) {
            NDArray h = piece(byKey, prefix + linear(i) + "amax_history", new Shape(config.amaxHistoryLen(), 3));
            NDArray sc = piece(byKey, prefix + linear(i) + "scale", new Shape(3));
            Tensors.copyInto(Tensors.narrow(history, 1, 3L * i, 3L * i + 3), h);
            Tensors.copyInto(Tensors.narrow(scale, 0, 3L * i, 3L * i + 3), sc);
        }
        try (NDManager temp = manager.newSubManager()) {
            Tensors.copyInto(scaleInv, temp.ones(scale.getShape(), DataType.FLOAT32).div(scale));
        }
        generation++;
    }

    private static NDArray piece(Map<String, NDArray> byKey, String key, Shape shape) {
        NDArray data = byKey.get(key);
        if (data == null) {
            throw new IllegalArgumentException("the checkpoint has no FP8 state " + key);
        }
        if (!data.getShape().equals(shape)) {
            throw new IllegalArgumentException("FP8 state " + key + " of shape " + data.getShape() + " does not fit this"
                    + " model's " + shape + " (--fp8-amax-history-len x the linear's input, weight and output gradient)");
        }
        return data;
    }

    /** @return linear {@code i}'s name as its slots' prefix, ending in a dot */
    private String linear(int i) {
        String slot = names.get(3 * i);
        return slot.substring(0, slot.length() - "input".length());
    }

    /** Closes the state's tensors. */
    @Override
    public void close() {
        manager.close();
    }
}
