package io.mcore4j.inference;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.transformer.InferenceContext;
import io.mcore4j.models.transformer.KeyValueCache;

import java.util.HashMap;
import java.util.Map;

/**
 * The key/value caches of one batch of sequences on this rank (Megatron-Core's static inference
 * context): per layer of this rank's model chunk, keys and values [b, groups/TP, maxSequenceLength, d],
 * allocated on the first pass in the dtype and on the device of that layer's keys, and the number of
 * positions filled so far. Every sequence of the batch is at the same position.
 *
 * <p>Use: {@code forward} a pass of {@code s} tokens per sequence with this context, then
 * {@link #advance(int) advance(s)}. Owns its tensors through the manager given at construction; close
 * that manager to free them. Not thread-safe: one cache per rank and batch.
 */
public final class KvCache implements InferenceContext {
    private final NDManager manager;
    private final CachedAttention attention;
    private final int batchSize;
    private final int maxSequenceLength;
    private final Map<Integer, Layer> layers = new HashMap<>();
    private int offset;

    /**
     * @param manager owner of the caches (a generation's manager, on the model's device)
     * @param attention the fused attention over caches
     * @param batchSize sequences in the batch
     * @param maxSequenceLength positions each sequence may fill (prompt and generated tokens)
     */
    KvCache(NDManager manager, CachedAttention attention, int batchSize, int maxSequenceLength) {
        if (batchSize < 1 || maxSequenceLength < 1) {
            throw new IllegalArgumentException("a cache needs a positive batch size and length, got " + batchSize
                    + " x " + maxSequenceLength);
        }
        this.manager = manager;
        this.attention = attention;
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
        return layers.computeIfAbsent(layerNumber, n -> new Layer());
    }

    private final class Layer implements KeyValueCache {
        private NDArray keys;
        private NDArray values;

        @Override
        public NDArray attend(AutogradScope scope, NDArray query, NDArray key, NDArray value) {
            long s = key.getShape().get(0);
            long b = key.getShape().get(1);
            if (b != batchSize) {
                throw new IllegalArgumentException("a pass of batch " + b + " does not fit a cache of batch " + batchSize);
            }
            long end = offset + s;
            if (end > maxSequenceLength) {
                throw new IllegalArgumentException("positions " + offset + ".." + (end - 1) + " run past the cache's "
                        + maxSequenceLength + " positions");
            }
            if (keys == null) {
                Shape shape = new Shape(batchSize, key.getShape().get(2), maxSequenceLength, key.getShape().get(3));
                keys = manager.zeros(shape, key.getDataType(), key.getDevice());
                values = manager.zeros(shape, value.getDataType(), value.getDevice());
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
