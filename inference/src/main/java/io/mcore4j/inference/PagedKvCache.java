package io.mcore4j.inference;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.InferenceContext;
import io.mcore4j.models.transformer.KeyValueCache;
import io.mcore4j.models.transformer.TransformerLayer;
import io.mcore4j.parallel.Communicator;

import java.util.HashMap;
import java.util.Map;

/**
 * A paged key/value cache (vLLM's PagedAttention layout) and the model's pass over it, on this rank: per layer of
 * the model, a pool of keys and values [numBlocks, blockSize, 2, groups/TP, d] allocated once (a slot's key and
 * value side by side, written and gathered in one op each), and a {@link BlockAllocator}
 * that hands their blocks to sequences. A sequence's positions live in the blocks its block table names, in order
 * (position {@code p} in block {@code table[p / blockSize]} at offset {@code p % blockSize}), so sequences of any
 * lengths run in one pass, each at its own positions, and a sequence that ends gives its blocks back at once.
 *
 * <p>Each dense layer runs its pass in one native call ({@link CachedLayer#paged}): it writes the pass's keys and
 * values at their slots, gathers each sequence's blocks by its table and attends under the mask of the positions
 * each query may see. What these depend on besides the layer (each token's rotary rows, the slots it writes, the
 * slots each sequence reads, the mask) is computed once per pass, before the layers, in one more native call.
 * {@link #forward} takes every input as a tensor, so a decode step of a fixed batch size has the same shapes and
 * reads the same tensors every time: what a CUDA graph captures, the per-pass work included. Heads are split over the
 * tensor-parallel group as in training (each layer's two partial sums all-reduced over it, the logits gathered);
 * the model must be one pipeline stage.
 *
 * <p>Owns its pools, tables and layer settings through the manager given at construction; close that manager to
 * free them. Not thread-safe: one cache per rank, driven by the engine's thread.
 */
public final class PagedKvCache {
    private final GptModel model;
    private final TransformerConfig config;
    private final Communicator tp;
    private final int blockSize;
    private final int maxModelLength;
    private final BlockAllocator allocator;
    private final CachedLayer layerModule;
    private final Map<Integer, CachedLayer.Weights> weights = new HashMap<>();
    /** Per layer, its pool of keys and values [numBlocks, blockSize, 2, groups/TP, d]. */
    private final Map<Integer, NDArray> pools = new HashMap<>();
    /** The module's rotation tables {a, b} [maxModelLength, 2, rotaryDims] ({@link CachedLayer#rotationTables}). */
    private final NDArray[] rotationTables;
    /** Host int64 [block size, query heads per key/value group], the module's pass layout. */
    private final NDArray layout;
    private final NDArray absent;

    /**
     * @param model the whole model on this rank (one pipeline stage), dense layers with rotary or no position
     *     embedding, no sliding window
     * @param manager owner of the pools and tables, on the model's device (a sub-manager of its parameters')
     * @param blockSize positions per block (vLLM's {@code --block-size}, typically 16)
     * @param numBlocks blocks per pool, the null block included
     * @param maxModelLength the longest sequence (prompt and generated tokens), at most the model's
     * @throws IllegalArgumentException naming what the model or a size does not allow
     */
    public PagedKvCache(GptModel model, NDManager manager, int blockSize, int numBlocks, int maxModelLength) {
        this.model = model;
        this.config = model.context().config();
        this.tp = model.context().groups().tp();
        if (blockSize < 1) {
            throw new IllegalArgumentException("block size " + blockSize + " must be positive");
        }
        if (maxModelLength < 1 || maxModelLength > config.maxSequenceLength()) {
            throw new IllegalArgumentException("max model length " + maxModelLength + " must be in [1, "
                    + config.maxSequenceLength() + "], the model's max sequence length");
        }
        if (!model.isPreProcess() || !model.isPostProcess() || model.context().groups().pp().size() != 1) {
            throw new IllegalArgumentException("the paged cache runs a model of one pipeline stage (pipeline-parallel"
                    + " size " + model.context().groups().pp().size() + "); Generator runs pipeline stages");
        }
        if (config.positionEmbedding() != TransformerConfig.PositionEmbedding.ROPE) {
            throw new IllegalArgumentException("the paged cache needs rotary position embeddings, whose positions each"
                    + " layer takes per token; the model's are " + config.positionEmbedding() + " (Generator runs it)");
        }
        this.blockSize = blockSize;
        this.maxModelLength = maxModelLength;
        this.allocator = new BlockAllocator(numBlocks);
        this.layerModule = CachedLayer.paged(manager);
        DataType dtype = config.dtype();
        this.absent = DataTypes.zeros(manager, new Shape(0), dtype);
        Shape pool = new Shape(numBlocks, blockSize, 2, config.numQueryGroups() / tp.size(), config.kvChannels());
        for (TransformerLayer layer : model.layers()) {
            int n = layer.layerNumber();
            if (config.windowSize(n) >= 0) {
                throw new IllegalArgumentException("layer " + n + " has a sliding window of " + config.windowSize(n)
                        + " tokens, which the paged layer module does not mask (Generator runs it)");
            }
            CachedLayer.Weights w = CachedLayer.weightsOf(layer, config, tp, manager, absent, false);
            if (w == null) {
                throw new IllegalArgumentException("layer " + n + " is not a plain dense layer (see the warning above),"
                        + " which the paged cache runs only in one call (Generator runs it op by op)");
            }
            weights.put(n, w);
            pools.put(n, DataTypes.zeros(manager, pool, dtype));
        }
        try (NDManager temporaries = manager.newSubManager()) {
            // one block past the max model length in whole blocks: the positions of a pass's padding rows
            int rows = ((maxModelLength + blockSize - 1) / blockSize + 1) * blockSize;
            NDArray[] tables = KvCache.rotaryTables(temporaries, config, rows, dtype);
            this.rotationTables = layerModule.rotationTables(tables[0], tables[1], manager);
        }
        this.layout = manager.newSubManager(Device.cpu())
                .create(new long[] {blockSize, config.numAttentionHeads() / config.numQueryGroups()});
    }

    /** @return the blocks' allocator */
    public BlockAllocator allocator() {
        return allocator;
    }

    /**
     * One pass of {@code s} tokens for each of {@code b} sequences: runs them through the model, writing their keys
     * and values into the blocks at their positions. A collective over the tensor-parallel group; queues device work
     * only (no host read), so it may run under a graph capture.
     *
     * @param scope a no-grad scope owning the result
     * @param tokens [s, b] int64 token ids on the model's device
     * @param positions [b, s] int64 each token's position, below the cache's max model length; a padding row may sit
     *     in the block after it (max model length rounded up to whole blocks), whose table entry is then the null block
     * @param blockTables [b, w] int64 each sequence's blocks (0 past its own), {@code w * blockSize} covering its
     *     positions
     * @param lastPositionOnly return the logits of the pass's last token per sequence only
     * @return the logits over the whole (padded) vocabulary gathered over tensor-parallel ranks, [b, V] or
     *     [s, b, V], in the model's dtype
     */
    public NDArray forward(AutogradScope scope, NDArray tokens, NDArray positions, NDArray blockTables,
                           boolean lastPositionOnly) {
        CachedLayer.Pass pass = layerModule.pagedPass(scope.manager(), rotationTables, positions, blockTables, layout);
        InferenceContext context = new InferenceContext() {
            @Override
            public int sequenceLengthOffset() {
                return 0; // rotary positions come per token through the pass; the embedding adds none
            }

            @Override
            public KeyValueCache keyValueCache(int layerNumber) {
                throw new IllegalStateException("layer " + layerNumber + " asked for a contiguous cache: the paged"
                        + " cache runs dense layers in one call only");
            }

            @Override
            public NDArray forwardLayer(AutogradScope s, TransformerLayer layer, NDArray hidden) {
                return layerModule.forward(s, weights.get(layer.layerNumber()), hidden, pools.get(layer.layerNumber()),
                        null, pass, absent);
            }
        };
        NDManager m = scope.manager();
        NDArray out = model.inferenceForward(scope, tokens, null, context);
        scope.release(pass.arguments().toArray(new NDArray[0]));
        long s = out.getShape().get(0);
        NDArray local = lastPositionOnly ? out.get(s - 1) : out;
        local.attach(m);
        NDArray logits = tp.size() == 1 ? local : tp.allGather(local, lastPositionOnly ? 1 : 2, m);
        scope.release(out == local ? null : out, local == logits ? null : local);
        return logits;
    }
}
