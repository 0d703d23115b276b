package io.mcore4j.inference.engine;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.inference.PagedKvCache;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One decode step of a fixed batch size (a bucket): one token per sequence, read from tensors made once, so that
 * every step of the bucket has the same shapes and reads the same memory. The body, the model's pass over the paged
 * cache and the greedy pick (argmax on the device), is the same code whether it runs eagerly or is captured into a
 * CUDA graph and replayed: with a {@link GraphCapture} the step runs eagerly for its first {@value #WARMUPS} steps
 * (libtorch's profiling executor specialises and fuses the layer module then), is captured on the next and replayed
 * from then on; without one (CPU, or ranks whose collectives a graph cannot hold), or if the capture fails (logged
 * once), it runs eagerly every time.
 *
 * <p>Rows past the batch are padding: token 0 at position 0 over the null block, which no sequence reads. Owns its
 * inputs, outputs and graph through a sub-manager of the one given; {@link #close()} frees them. Driven by the
 * engine's thread only.
 */
final class DecodeStep implements AutoCloseable {
    /** Eager steps before the capture: the layer module's profiling runs happen outside the graph. */
    static final int WARMUPS = 3;

    private final PagedKvCache cache;
    private final int vocabulary;
    private static final Logger LOG = LoggerFactory.getLogger(DecodeStep.class);

    /** The device's graph capture; null to run eagerly (none, or a capture that failed). */
    private GraphCapture capture;
    private final int bucket;
    private final NDManager manager;
    /** The step's inputs in one tensor [bucket + bucket + bucket * width], copied from the host in one copy. */
    private final NDArray inputs;
    private final long[] staged;
    private final NDArray tokens;
    private final NDArray positions;
    private final NDArray tables;
    private NDManager outputs;
    private NDArray logits;
    private NDArray picked;
    private GraphCapture.CapturedGraph graph;
    private int eagerSteps;

    /**
     * @param cache the paged cache the step runs over
     * @param bucket sequences per step
     * @param width blocks per sequence's table (covering the engine's max model length)
     * @param vocabulary ids a token may take (the logits' first columns)
     * @param capture the device's graph capture, or null to run eagerly
     * @param parent owner of the step's sub-manager, on the model's device
     */
    DecodeStep(PagedKvCache cache, int bucket, int width, int vocabulary, GraphCapture capture, NDManager parent) {
        this.cache = cache;
        this.vocabulary = vocabulary;
        this.capture = capture;
        this.bucket = bucket;
        this.manager = parent.newSubManager();
        this.staged = new long[2 * bucket + bucket * width];
        this.inputs = manager.zeros(new Shape(staged.length), DataType.INT64);
        // views of the one tensor: what the graph reads, refreshed by one copy per step
        this.tokens = Tensors.narrow(inputs, 0, 0, bucket).reshape(1, bucket);
        this.positions = Tensors.narrow(inputs, 0, bucket, 2L * bucket).reshape(bucket, 1);
        this.tables = Tensors.narrow(inputs, 0, 2L * bucket, staged.length).reshape(bucket, width);
    }

    /**
     * Runs the step on the given inputs (padded to the bucket).
     *
     * @param tokenIds [bucket] each sequence's input token
     * @param tokenPositions [bucket] its position
     * @param blockTables [bucket * width] the sequences' block tables, row by row
     */
    void run(long[] tokenIds, long[] tokenPositions, long[] blockTables) {
        System.arraycopy(tokenIds, 0, staged, 0, bucket);
        System.arraycopy(tokenPositions, 0, staged, bucket, bucket);
        System.arraycopy(blockTables, 0, staged, 2 * bucket, staged.length - 2 * bucket);
        try (NDManager staging = manager.newSubManager()) {
            Tensors.copyInto(inputs, staging.create(staged, inputs.getShape()));
        }
        if (graph == null && capture != null && eagerSteps >= WARMUPS) {
            renewOutputs();
            capture.releaseCachedMemory();
            try {
                graph = capture.capture(this::body);
            } catch (IllegalStateException e) {
                LOG.warn("capturing the decode step of batch {} into a CUDA graph failed ({}); it runs eagerly",
                        bucket, e.getMessage());
                capture = null;
            }
        }
        if (graph != null) {
            graph.replay();
            return;
        }
        eagerSteps++;
        renewOutputs();
        body();
    }

    private void renewOutputs() {
        if (outputs != null) {
            outputs.close();
        }
        outputs = manager.newSubManager();
    }

    /** The step's work: the pass, its last logits cut to the vocabulary, and their argmax, into {@link #outputs}. */
    private void body() {
        try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
            NDArray all = cache.forward(scope, tokens, positions, tables, true);
            NDArray cut = all.getShape().get(1) == vocabulary ? all : all.get(":, :{}", vocabulary);
            logits = cut;
            picked = cut.argMax(1);
            logits.attach(outputs);
            picked.attach(outputs);
        }
    }

    /** @return the last step's greedy picks [bucket] int64, on the device (valid until the next step) */
    NDArray picked() {
        return picked;
    }

    /** @return the last step's logits [bucket, vocabulary] in the model's dtype (valid until the next step) */
    NDArray logits() {
        return logits;
    }

    @Override
    public void close() {
        if (graph != null) {
            graph.close();
            graph = null;
        }
        manager.close();
    }
}
