package io.mcore4j.inference;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.InferenceContext;
import io.mcore4j.models.transformer.KeyValueCache;
import io.mcore4j.models.transformer.RotaryEmbedding;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.parallel.Communicator;

import java.util.HashMap;
import java.util.Map;

/**
 * The key/value caches of one batch of sequences on this rank (Megatron-Core's static inference
 * context): per layer of this rank's model chunk, keys and values [b, groups/TP, maxSequenceLength, d],
 * allocated on the first pass in the dtype and on the device of that layer's activations, and the number
 * of positions filled so far. Every sequence of the batch is at the same position.
 *
 * <p>A dense layer runs each pass in one native call ({@link CachedLayer}) over its cache and rotary tables
 * that this cache computes once for every position ({@link RotaryEmbedding#tables}); other layers (mixtures of
 * experts) run op by op and attend through {@link #keyValueCache(int)} with {@link CachedAttention}.
 *
 * <p>A layer with a sliding window ({@link TransformerConfig#windowSize(int)}) attends only the positions its window
 * reaches: the pass's mask of filled positions is cut to the window (made once per pass and window), over the whole
 * caches. With the one-call module of static shapes such a layer still runs in one call under that mask; with the
 * module of narrowed caches, which takes no mask, and op by op it attends through {@link CachedAttention#attendMasked}.
 *
 * <p>Use: {@code forward} a pass of {@code s} tokens per sequence with this context, then
 * {@link #advance(int) advance(s)}. Owns its tensors through the manager given at construction; close
 * that manager to free them. Not thread-safe: one cache per rank and batch.
 */
public final class KvCache implements InferenceContext {
    private final NDManager manager;
    private final CachedAttention attention;
    private final CachedLayer fused;
    private final TransformerConfig config;
    private final Communicator tp;
    private final int batchSize;
    private final int maxSequenceLength;
    private final Map<Integer, Layer> layers = new HashMap<>();
    private int offset;
    /**
     * Rotary cos and sin (its first half negated) of every position [maxSequenceLength, rotaryDims] (zero
     * columns without rotary), and the empty tensor.
     */
    private NDArray cosTable;
    private NDArray sinTable;
    private NDArray absent;
    /** All positions 0..maxSequenceLength-1 [maxSequenceLength] int64: the masks are made from them. */
    private NDArray allPositions;
    /** The pass's positions [s] int64 and its masks [s, maxSequenceLength] by window (-1: none), for maskStart..maskEnd-1. */
    private int maskStart = -1;
    private int maskEnd = -1;
    private NDArray maskPositions;
    private final Map<Integer, NDArray> masks = new HashMap<>();
    /** What the current pass (positions passStart..passEnd-1) gives every layer; remade when the pass changes. */
    private int passStart = -1;
    private int passEnd = -1;
    private CachedLayer.Pass pass;

    /**
     * @param manager owner of the caches (a generation's manager, on the model's device)
     * @param attention the fused attention over caches (layers that run op by op)
     * @param fused the one-call dense layer, or null to run every layer op by op
     * @param config the model's config
     * @param tp the tensor-parallel group the layers are split over
     * @param batchSize sequences in the batch
     * @param maxSequenceLength positions each sequence may fill (prompt and generated tokens)
     */
    KvCache(NDManager manager, CachedAttention attention, CachedLayer fused, TransformerConfig config, Communicator tp,
            int batchSize, int maxSequenceLength) {
        if (batchSize < 1 || maxSequenceLength < 1) {
            throw new IllegalArgumentException("a cache needs a positive batch size and length, got " + batchSize
                    + " x " + maxSequenceLength);
        }
        this.manager = manager;
        this.attention = attention;
        this.fused = fused;
        this.config = config;
        this.tp = tp;
        this.batchSize = batchSize;
        this.maxSequenceLength = maxSequenceLength;
    }

    @Override
    public int sequenceLengthOffset() {
        return offset;
    }

    /** @return the positions each sequence may fill */
    public int maxSequenceLength() {
        return maxSequenceLength;
    }

    /**
     * Moves the offset past a pass's tokens once every layer has run it.
     *
     * @param tokens tokens per sequence in the pass
     * @throws IllegalArgumentException if that runs past the cache's length
     */
    public void advance(int tokens) {
        if (offset + tokens > maxSequenceLength) {
            throw new IllegalArgumentException("advancing by " + tokens + " from position " + offset
                    + " runs past the cache's " + maxSequenceLength + " positions");
        }
        offset += tokens;
    }

    @Override
    public KeyValueCache keyValueCache(int layerNumber) {
        return layer(layerNumber);
    }

    /** @return how many of this rank's layers have run in one call ({@link CachedLayer}) so far */
    int layersRunWhole() {
        return (int) layers.values().stream().filter(l -> l.weights != null).count();
    }

    private Layer layer(int layerNumber) {
        return layers.computeIfAbsent(layerNumber, n -> new Layer(config.windowSize(n)));
    }

    @Override
    public NDArray forwardLayer(AutogradScope scope, TransformerLayer layer, NDArray hidden) {
        if (fused == null) {
            return null;
        }
        Layer cache = layer(layer.layerNumber());
        if (cache.window >= 0 && !fused.staticShapes()) {
            return null; // the narrowed caches' module has no mask to cut to the window
        }
        if (!cache.resolved) {
            if (absent == null) {
                absent = CachedLayer.absent(manager, hidden);
            }
            cache.weights = CachedLayer.weightsOf(layer, config, tp, manager, absent, true);
            cache.resolved = true;
        }
        if (cache.weights == null) {
            return null;
        }
        long s = hidden.getShape().get(0);
        long end = checkPass(s, hidden.getShape().get(1));
        cache.allocate(new Shape(batchSize, config.numQueryGroups() / tp.size(), maxSequenceLength, config.kvChannels()),
                DataTypes.of(hidden));
        passInputs(hidden, offset, (int) end);
        CachedLayer.Pass layerPass = cache.window < 0 ? pass
                : CachedLayer.Pass.masked(pass.cos(), pass.sin(), pass.positions(), mask(offset, (int) end, cache.window));
        return fused.forward(scope, cache.weights, hidden, cache.keys, cache.values, layerPass, absent);
    }

    /**
     * The pass's positions {@code start..end-1} [s] int64, made on the device on first use in the pass.
     */
    private NDArray positions(int start, int end) {
        if (start != maskStart || end != maskEnd) {
            for (NDArray t : masks.values()) {
                t.close();
            }
            masks.clear();
            if (maskPositions != null) {
                maskPositions.close();
            }
            maskPositions = manager.arange(start, end, 1, DataType.INT64);
            maskStart = start;
            maskEnd = end;
        }
        return maskPositions;
    }

    /**
     * The pass's mask [s, maxSequenceLength] bool, made on the device once per pass and window: query {@code i}
     * (at position {@code start + i}) attends position {@code j} iff {@code j <= start + i} and, with a window,
     * {@code j >= start + i - window}.
     *
     * @param window tokens before a query that it attends, or -1 for all
     */
    private NDArray mask(int start, int end, int window) {
        NDArray column = positions(start, end);
        return masks.computeIfAbsent(window, w -> {
            if (allPositions == null) {
                allPositions = manager.arange(0, maxSequenceLength, 1, DataType.INT64);
            }
            try (NDManager temporaries = manager.newSubManager()) {
                NDArray row = allPositions.reshape(1, maxSequenceLength);
                NDArray query = column.reshape(end - start, 1);
                row.attach(temporaries);
                query.attach(temporaries);
                NDArray allowed = row.lte(query);
                if (w >= 0) {
                    allowed = allowed.logicalAnd(row.gte(query.sub(Tensors.scalar(w, query, temporaries))));
                }
                allowed.attach(manager);
                return allowed;
            }
        });
    }

    /** Checks a pass of {@code s} tokens of a batch of {@code b} against the cache; returns the length it reaches. */
    private long checkPass(long s, long b) {
        if (b != batchSize) {
            throw new IllegalArgumentException("a pass of batch " + b + " does not fit a cache of batch " + batchSize);
        }
        long end = offset + s;
        if (end > maxSequenceLength) {
            throw new IllegalArgumentException("positions " + offset + ".." + (end - 1) + " run past the cache's "
                    + maxSequenceLength + " positions");
        }
        return end;
    }

    /**
     * Sets {@link #pass} for a pass over positions {@code start..end-1}, computing the rotary tables on first use:
     * views of the tables' rows (rows {@code 0..end-1} for the narrowing module, {@code start..end-1} for the
     * static one) and, for the static module, the positions and the mask, made on the device (no host copy).
     */
    private void passInputs(NDArray like, int start, int end) {
        if (cosTable == null) {
            NDArray[] tables = rotaryTables(manager, config, maxSequenceLength, DataTypes.of(like));
            cosTable = tables[0];
            sinTable = tables[1];
        }
        if (start == passStart && end == passEnd) {
            return;
        }
        if (pass != null) {
            // the positions and masks belong to the mask cache, which renews them with the pass
            for (NDArray t : new NDArray[] {pass.cos(), pass.sin()}) {
                if (!t.isReleased()) {
                    t.close();
                }
            }
        }
        int from = fused.staticShapes() ? start : 0;
        NDArray cos = Tensors.narrow(cosTable, 0, from, end);
        NDArray sin = sinTable == cosTable ? cos : Tensors.narrow(sinTable, 0, from, end);
        pass = fused.staticShapes() ? CachedLayer.Pass.masked(cos, sin, positions(start, end), mask(start, end, -1))
                : CachedLayer.Pass.narrowing(cos, sin);
        passStart = start;
        passEnd = end;
    }

    /**
     * The layer modules' rotary tables of positions {@code 0..length-1}: cos and sin [length, rotaryDims], the sine's
     * first half negated (the modules rotate as {@code x * cos + (x2, x1) * (-sin, sin)}), or one table of zero columns
     * (returned twice) without rotary.
     *
     * @param manager owner of the tables
     * @param config the model's config
     * @param length positions
     * @param dtype the activations' dtype
     * @return {cos, sin}
     */
    static NDArray[] rotaryTables(NDManager manager, TransformerConfig config, int length, DataType dtype) {
        if (!config.usesRope()) {
            NDArray none = DataTypes.zeros(manager, new Shape(length, 0), dtype);
            return new NDArray[] {none, none};
        }
        try (NDManager temporaries = manager.newSubManager()) {
            RotaryEmbedding rope = new RotaryEmbedding(config.kvChannels(), config.rotaryPercent(), config.rotaryBase(),
                    config.ropeScaling());
            NDArray[] tables = rope.tables(temporaries, length, dtype);
            int half = rope.rotaryDims() / 2;
            NDArray sin = NDArrays.concat(new NDList(Tensors.narrow(tables[1], 1, 0, half).neg(),
                    Tensors.narrow(tables[1], 1, half, rope.rotaryDims())), 1);
            tables[0].attach(manager);
            sin.attach(manager);
            return new NDArray[] {tables[0], sin};
        }
    }

    private final class Layer implements KeyValueCache {
        /** Tokens before a query that this layer attends, or -1 for all. */
        private final int window;
        private NDArray keys;
        private NDArray values;
        /** Whether {@link #weights} has been looked up; null weights then mean the layer runs op by op. */
        private boolean resolved;
        private CachedLayer.Weights weights;

        Layer(int window) {
            this.window = window;
        }

        void allocate(Shape shape, DataType dtype) {
            if (keys == null) {
                keys = DataTypes.zeros(manager, shape, dtype);
                values = DataTypes.zeros(manager, shape, dtype);
            }
        }

        @Override
        public NDArray attend(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
            long s = key.getShape().get(0);
            long end = checkPass(s, key.getShape().get(1));
            allocate(new Shape(batchSize, key.getShape().get(2), maxSequenceLength, key.getShape().get(3)), DataTypes.of(key));
            if (window >= 0) {
                NDArray context = attention.attendMasked(query, key, value, keys, values, positions(offset, (int) end),
                        mask(offset, (int) end, window));
                context.attach(scope.manager());
                return context;
            }
            // views of the filled positions and this pass's; the module writes the pass's keys and values into them
            NDArray keyView = keys.get(":, :, :{}", end);
            NDArray valueView = values.get(":, :, :{}", end);
            keyView.attach(scope.manager());
            valueView.attach(scope.manager());
            NDArray context = attention.attend(query, key, value, keyView, valueView);
            context.attach(scope.manager());
            scope.release(keyView, valueView);
            return context;
        }
    }
}
