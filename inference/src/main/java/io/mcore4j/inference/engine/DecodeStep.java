package io.mcore4j.inference.engine;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.inference.PagedKvCache;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ReduceOp;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One decode step of a fixed batch size (a bucket): one token per sequence, read from tensors made once, so that
 * every step of the bucket has the same shapes and reads the same memory. The body, the model's pass over the paged
 * cache and the greedy pick (argmax on the device), is the same code whether it runs eagerly or is captured into a
 * CUDA graph and replayed: with a {@link GraphCapture} the step runs eagerly for its first {@value #WARMUPS} steps
 * (libtorch's profiling executor specialises and fuses the layer module then), is captured on the next and replayed
 * from then on; without one (CPU), or if the capture fails (logged once), it runs eagerly every time.
 *
 * <p><b>Tensor parallelism.</b> The body's collectives over the tensor-parallel group (each layer's all-reduces, the
 * logits' all-gather) are captured with it: NCCL queues them on the capture's stream, and each replay runs them. So
 * every rank of the group must capture at the same step and then replay at the same steps, which holds because every
 * rank runs the same plans: the steps of a bucket, hence its eager warm-ups, are the same on every rank, and the
 * engine gives every rank a capture or none ({@link #onEveryRank}). Right after its capture each rank asks the group
 * whether every rank captured (a collective outside the graph, before anything is replayed); if one failed, every
 * rank drops its graph and runs the bucket eagerly, so none is left replaying collectives that a peer runs eagerly.
 *
 * <p>Each step also leaves the next step's inputs on the device (its picks as tokens, positions one on), so that the
 * engine can queue the next step of the same sequences ({@link #runAdvanced}) before it reads this one's picks.
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

    /** The device's graph capture; null to run eagerly (none, or a capture that failed on some rank). */
    private GraphCapture capture;
    private final Communicator tp;
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
     * @param capture the device's graph capture, or null to run eagerly; at tensor-parallel size above 1 non-null on
     *     every rank or on none
     * @param tp the model's tensor-parallel group, whose ranks run the same steps
     * @param parent owner of the step's sub-manager, on the model's device
     */
    DecodeStep(PagedKvCache cache, int bucket, int width, int vocabulary, GraphCapture capture, Communicator tp,
               NDManager parent) {
        this.cache = cache;
        this.vocabulary = vocabulary;
        this.capture = capture;
        this.tp = tp;
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
        execute();
    }

    /**
     * Runs the step on the inputs the last step left (see {@link #body}): the same sequences, each fed its greedy pick
     * at its next position, with nothing copied from the host, so it can be queued before the host has read the last
     * step's picks.
     *
     * @throws IllegalStateException if this step has not run yet
     */
    void runAdvanced() {
        if (outputs == null) {
            throw new IllegalStateException("the decode step of batch " + bucket + " advances from a step it has not run");
        }
        execute();
    }

    private void execute() {
        if (graph == null && capture != null && eagerSteps >= WARMUPS) {
            captureOnEveryRank();
        }
        if (graph != null) {
            graph.replay();
            return;
        }
        eagerSteps++;
        renewOutputs();
        body();
    }

    /**
     * Captures the body on every rank of the group (all reach this at the same step); keeps the graph only if every
     * rank captured, else runs eagerly from now on, on every rank.
     */
    private void captureOnEveryRank() {
        renewOutputs();
        capture.releaseCachedMemory();
        String failure = null;
        try {
            graph = capture.capture(this::body);
        } catch (RuntimeException e) {
            // a refused capture (IllegalStateException) or anything else: either way the peers must hear of it in
            // the agreement below rather than wait there; an error that is not the capture's recurs in the eager run
            failure = e instanceof IllegalStateException ? e.getMessage() : e.toString();
        }
        if (onEveryRank(failure == null, tp, manager)) {
            return;
        }
        if (graph != null) {
            graph.close();
            graph = null;
        }
        capture = null;
        if (failure != null) {
            LOG.warn("capturing the decode step of batch {} into a CUDA graph failed on tensor-parallel rank {} of {} ({});"
                    + " it runs eagerly", bucket, tp.rank(), tp.size(), failure);
        } else {
            LOG.warn("the decode step of batch {} runs eagerly: another tensor-parallel rank failed to capture it into a"
                    + " CUDA graph (its log names the cause)", bucket);
        }
    }

    /**
     * Whether a condition holds on every rank of the group: a collective (a MIN all-reduce of one flag, read on the
     * host) that every rank calls at the same point, outside any capture.
     *
     * @param mine whether it holds on this rank
     * @param tp the group
     * @param manager owner of the temporaries, on the device the group communicates on
     * @return whether it holds on every rank; {@code mine} for a group of one
     */
    static boolean onEveryRank(boolean mine, Communicator tp, NDManager manager) {
        if (tp.size() == 1) {
            return mine;
        }
        try (NDManager temporaries = manager.newSubManager()) {
            NDArray flag = temporaries.create(new int[] {mine ? 1 : 0});
            return tp.allReduce(flag, ReduceOp.MIN, temporaries).toIntArray()[0] == 1;
        }
    }

    private void renewOutputs() {
        if (outputs != null) {
            outputs.close();
        }
        outputs = manager.newSubManager();
    }

    /**
     * The step's work: the pass, its last logits cut to the vocabulary, and their argmax, into {@link #outputs}; then
     * the inputs of the step after it, on the device: each row's pick becomes its token and its position moves one on
     * (a padding row, whose table names no block, keeps position 0), for {@link #runAdvanced}.
     */
    private void body() {
        try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
            NDArray all = cache.forward(scope, tokens, positions, tables, true);
            NDArray cut = all.getShape().get(1) == vocabulary ? all : all.get(":, :{}", vocabulary);
            logits = cut;
            picked = cut.argMax(1);
            logits.attach(outputs);
            picked.attach(outputs);
            Tensors.copyInto(tokens, picked.reshape(1, bucket));
            // block ids are >= 0 and a sequence's first is not the null block 0: the sign is 1 for a sequence, 0 for
            // padding (no host scalar, which a capture could not copy)
            positions.addi(Tensors.narrow(tables, 1, 0, 1).sign());
        }
    }

    /** @return sequences per step */
    int bucket() {
        return bucket;
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
