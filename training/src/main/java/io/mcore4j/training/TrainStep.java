package io.mcore4j.training;

import io.mcore4j.moe.MoeAuxLossTracker;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.fp8.Fp8Kernels;
import io.mcore4j.core.fp8.Fp8Recipe;
import io.mcore4j.core.fp8.Fp8Scaling;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.optimizer.DistributedDataParallel;
import io.mcore4j.optimizer.MegatronOptimizer;
import io.mcore4j.optimizer.OptimizerConfig;
import io.mcore4j.optimizer.Optimizers;
import io.mcore4j.optimizer.ParameterLayout;
import io.mcore4j.optimizer.StepResult;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;
import io.mcore4j.pipeline.ScheduleConfig;
import io.mcore4j.pipeline.ScheduleResult;
import io.mcore4j.pipeline.Schedules;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.DoubleSupplier;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One training iteration, in the one order every front-end uses: read this rank's micro-batches,
 * run the forward-backward schedule over them with the loss multiplied by the loss scale (and the
 * MoE auxiliary losses given the same upstream gradient), finish the data-parallel gradient
 * reduction (started during the last backward when {@link OptimizerConfig#overlapGradReduce()}),
 * unscale, clip or skip, step the optimizer, update the FP8 linears' scaling state (the model's
 * {@link TrainingModel#fp8Scaling()}, amaxes reduced with MAX), zero the gradients. This class is the only place that
 * knows the micro-batch count and applies the loss scale; the optimizer owns the scale's value.
 *
 * <p>With {@link OptimizerConfig#overlapParamGather()} the optimizer step only starts the
 * distributed optimizer's parameter all-gathers; the next iteration's forward waits for each bucket
 * as it reaches its parameters (the optimizer is the model's forward pre-hook), or, for a model that
 * cannot tell ({@link TrainingModel#addForwardPreHook}), before its first forward. {@link #evaluate},
 * {@link #shardedState()} and {@link #close()} write every pending parameter first, as Megatron
 * disables its pre-hooks for evaluation and checkpoints; {@link #finishParamSync()} does it for other
 * readers of the weights.
 *
 * <p>Communicates over the pipeline group (schedule), the data- and context-parallel groups
 * (gradients, the reported loss) and the world group (gradient norm). Every rank of the world calls {@link #run}
 * and {@link #evaluate} together. Owns the data-parallel wrapper and the optimizer; the model
 * stays the caller's. One instance is used by one thread.
 */
public final class TrainStep implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(TrainStep.class);
    /** Prefix of model keys in checkpoints. */
    public static final String MODEL_PREFIX = "model.";
    /** Prefix of optimizer keys in checkpoints. */
    public static final String OPTIMIZER_PREFIX = "optimizer.";
    /** Prefix of the FP8 linears' scaling state in checkpoints (amax histories and scales, keyed by linear). */
    public static final String FP8_PREFIX = "fp8.";

    private final TrainingModel model;
    private final ProcessGroups groups;
    private final NDManager manager;
    private final int microBatchSize;
    private final int seqLength;
    private final int microBatches;
    private final boolean timePhases;
    private final DistributedDataParallel ddp;
    private final MegatronOptimizer optimizer;
    private final ScheduleConfig schedule;
    /** Whether the model tells the optimizer before each forward reads parameters (overlapped parameter all-gather). */
    private final boolean forwardWaitsForGather;
    // the losses of steps whose results have not been read yet (see TrainStepResult)
    private final NDManager unreadLosses;
    // the schedule's second implementation, replayed from a CUDA graph; null when every step is eager
    private final ScheduleGraph graph;
    // whether that graph also holds the gradients' synchronisation (overlapped with its backward)
    private final boolean reduceInGraph;
    // keys of the model's frozen parameters, whose pieces checkpoints leave out
    private final Set<String> frozenKeys = new HashSet<>();
    // the copies of the FP8 scaling state the last shardedState() handed out; null before
    private NDManager fp8Pieces;

    private TrainStep(Builder b) {
        this.model = b.model;
        this.groups = b.groups;
        this.manager = b.manager;
        this.microBatchSize = b.microBatchSize;
        this.seqLength = b.seqLength;
        this.microBatches = b.microBatches;
        this.timePhases = b.timePhases;
        // the one place frozen parameters (LoRA's base weights) are left out: no gradient buffers,
        // no optimizer state, no checkpoint pieces
        List<Parameter> parameters = model.parameters().stream().filter(Parameter::isTrainable).toList();
        model.namedParameters(MODEL_PREFIX).forEach((key, p) -> {
            if (!p.isTrainable()) {
                frozenKeys.add(key);
            }
        });
        this.ddp = new DistributedDataParallel(parameters, groups, b.optimizer,
                model.sharedEmbeddingParameters().stream().filter(Parameter::isTrainable).toList());
        if (ddp.reducesReportedGradients()) {
            model.addGradientReadyListener(ddp);
        }
        // optimizer state is keyed like the weights it belongs to, so checkpoints reshard across layouts
        Map<Parameter, String> keys = new IdentityHashMap<>();
        model.namedParameters(MODEL_PREFIX).forEach((key, p) -> keys.put(p, key));
        this.optimizer = Optimizers.create(parameters, ddp, groups, b.optimizer, ParameterLayout.byKey(keys::get));
        ParameterResidency residency = optimizer.parameterResidency();
        if (residency != null) {
            // ZeRO-3: the model gathers each layer's weights as it reads them, and releases them after
            if (!model.addParameterResidency(residency)) {
                throw new IllegalArgumentException("--data-parallel-sharding-strategy "
                        + b.optimizer.dataParallelShardingStrategy().flag() + " needs a model that gathers and releases its"
                        + " parameters around each use; " + model.getClass().getSimpleName() + " does not");
            }
        }
        this.forwardWaitsForGather = residency != null
                || b.optimizer.overlapParamGather() && model.addForwardPreHook(optimizer);
        this.schedule = ScheduleConfig.of(microBatches, model.activationShape(microBatchSize, seqLength),
                model.activationDtype());
        this.unreadLosses = manager.newSubManager();
        this.graph = b.cudaGraph.enabled() ? Kernels.find(GraphCapture.class, manager.getDevice())
                .map(capture -> new ScheduleGraph(capture, b.cudaGraph, manager, groups::prepareCapture)).orElseGet(() -> {
                    LOG.warn("--cuda-graph-impl local: no CUDA graph support on {} (a CUDA device and mcore4j's graph"
                            + " library are needed); every step runs eagerly", manager.getDevice());
                    return null;
                }) : null;
        this.reduceInGraph = graph != null && b.optimizer.overlapGradReduce();
    }

    /** A graph body's start where the graph holds the reductions: gradients cleared, the step armed for its passes. */
    private void clearAndArm() {
        ddp.zeroGrad();
        ddp.expectBackwardPasses(microBatches);
    }

    /** A graph body's end where the graph holds the reductions: the gradients synchronised into buffers it keeps. */
    private void synchroniseAndPin() {
        ddp.finishGradSync();
        ddp.pinSynced();
    }

    /**
     * @param model the model to train (stays the caller's to close, after this step)
     * @param groups this rank's groups
     * @param manager parent of the step's temporaries (the rank's root manager, on the training device)
     * @return a builder
     */
    public static Builder builder(TrainingModel model, ProcessGroups groups, NDManager manager) {
        return new Builder(model, groups, manager);
    }

    /**
     * The MoE routers' auxiliary losses of the steps {@link #run} since the last call (Megatron's
     * {@code load_balancing_loss}, {@code z_loss}, ... averaged over MoE layers, and per layer): each step's
     * values (summed over its micro-batches, scaled by {@code 1 / micro-batches}) summed over those steps; empty
     * for a model without them. Collective: every rank calls it after the same steps. It reads the values on the
     * host, which waits for the device, so a training loop calls it once per logged window rather than per step
     * (where the wait would leave the device idle while the host prepares the next step).
     *
     * @return the report of the steps since the last call
     */
    public MoeAuxLossTracker.Report reportAuxLosses() {
        return model.reportAuxLosses(1.0 / microBatches);
    }

    /**
     * Runs one training iteration (see the class comment).
     *
     * @param learningRate the learning rate of this iteration
     * @param weightDecay the weight decay of this iteration
     * @param data this rank's micro-batches
     * @param consumedSamples samples consumed before this iteration, all data-parallel ranks together
     * @return what the iteration did
     */
    public TrainStepResult run(double learningRate, double weightDecay, BatchSource data, long consumedSamples) {
        long start = System.nanoTime();
        double scale = optimizer.lossScale();
        double[] marks = new double[6];
        try (NDManager step = manager.newSubManager()) {
            List<MicroBatch> batches = read(step, data, consumedSamples);
            marks[0] = mark();
            // the auxiliary losses get the upstream gradient each micro-batch's main loss gets; under
            // context parallelism each rank's part is a share of the whole sequences' loss whose
            // gradient the dp-cp average divides by CP, so it is scaled by CP like the main loss (Megatron's)
            model.setAuxLossScale(scale * groups.cp().size() / microBatches);
            ddp.expectBackwardPasses(microBatches);
            if (!forwardWaitsForGather || graph != null) {
                // a replayed graph's forward calls no hooks, and a capture cannot wait on the gathers started after the step
                optimizer.finishParamSync();
            }
            // where the graph holds the overlapped reductions too, its body arms the step after clearing, and
            // synchronises and pins the gradients after the schedule
            ScheduleResult result = graph == null ? schedule(batches, scale, false)
                    : graph.run(batches, scale, b -> schedule(b, scale, false),
                            reduceInGraph ? this::clearAndArm : ddp::zeroGrad,
                            reduceInGraph ? this::synchroniseAndPin : () -> { }, manager);
            long queued = System.nanoTime();
            marks[1] = mark();
            model.finishStep();
            if (reduceInGraph && graph.ownsGradients()) {
                ddp.restorePinned();
            } else {
                ddp.finishGradSync();
            }
            marks[2] = mark();
            StepResult s = optimizer.step(learningRate, weightDecay); // reads the gradient norm: one host sync
            updateFp8Scaling();
            marks[3] = mark();
            if (graph != null && graph.ownsGradients()) {
                ddp.keepGradients(); // the next replay writes them afresh
            } else {
                ddp.zeroGrad();
            }
            marks[4] = mark();
            double seconds = (System.nanoTime() - start) / 1e9;
            TrainStepResult.PhaseTimes phases = timePhases ? new TrainStepResult.PhaseTimes(
                    marks[0] - start / 1e9, marks[1] - marks[0], (queued - start) / 1e9 - (marks[0] - start / 1e9),
                    marks[2] - marks[1], marks[3] - marks[2], marks[4] - marks[3]) : null;
            long samples = (long) microBatches * microBatchSize * groups.dims().dataParallel();
            return new TrainStepResult(deferredLoss(result.deviceLosses(), scale), s.gradNorm(), s.lossScale(),
                    s.skipped(), s.numZeros(), samples, samples * seqLength, seconds, phases);
        }
    }

    /**
     * Ends the step of the model's FP8 linears (after the optimizer changed the weights, so their float8 copies are
     * cast again): the step's amaxes are reduced with MAX over the tensor-parallel group (every rank must cast a
     * layer's tensors with one scale) and the data- and context-parallel group (Megatron's amax reduction group:
     * replicas keep identical scales), and the next scales computed, on the device. Skipped steps update too, as
     * Transformer Engine records amaxes whatever the optimizer does.
     */
    private void updateFp8Scaling() {
        Fp8Scaling fp8 = model.fp8Scaling();
        if (fp8 != null) {
            fp8.update(amax -> groups.dpCp().allReduce(groups.tp().allReduce(amax, ReduceOp.MAX, amax.getManager()),
                    ReduceOp.MAX, amax.getManager()));
        }
    }

    /**
     * Runs the forwards of one global batch without gradients.
     *
     * @param data the evaluation micro-batches
     * @param consumedSamples evaluation samples consumed before this batch
     * @return the mean loss over the micro-batches and data-parallel ranks on the last stage; NaN elsewhere
     */
    public double evaluate(BatchSource data, long consumedSamples) {
        optimizer.finishParamSync();
        try (NDManager step = manager.newSubManager()) {
            return dataParallelMean(schedule(read(step, data, consumedSamples), 1.0, true).meanLoss());
        }
    }

    private List<MicroBatch> read(NDManager step, BatchSource data, long consumedSamples) {
        // every micro-batch of the step is read before any forward is queued: the host-to-device
        // copies then wait for nothing, instead of for the previous micro-batch's kernels
        List<MicroBatch> batches = new ArrayList<>(microBatches);
        boolean reads = false;
        for (int c = 0; c < model.numChunks(); c++) {
            reads |= model.readsData(c);
        }
        for (int mb = 0; mb < microBatches; mb++) {
            batches.add(reads ? Objects.requireNonNull(data.microBatch(step, consumedSamples, mb), "micro-batch")
                    : MicroBatch.NONE);
        }
        return batches;
    }

    /**
     * The step's loss, {@code dataParallelMean(mean of the micro-batch losses / scale)} as {@link #evaluate}
     * computes it on the host, left on the device and read when the result's {@link TrainStepResult#loss()}
     * is first called. Over one rank it is read as the micro-batch losses and averaged on the host, exactly as
     * before; over several the per-rank value is formed on the device in float64 (the sum of a few float32
     * values is exact in float64 whatever the order, and the divisions round as the host's do) and averaged
     * with the same collective, at the same point of the step.
     */
    private DoubleSupplier deferredLoss(NDArray losses, double scale) {
        if (!groups.isLastStage()) {
            return () -> Double.NaN;
        }
        Objects.requireNonNull(losses, "the schedule returned no losses on the last stage");
        losses.attach(unreadLosses);
        Communicator dp = groups.dpCp();
        if (dp.size() == 1) {
            return () -> {
                checkUnread(losses);
                float[] values = losses.toFloatArray();
                losses.close();
                return ScheduleResult.meanOf(values) / scale;
            };
        }
        NDArray reduced;
        try (NDManager temp = unreadLosses.newSubManager()) {
            losses.attach(temp);
            NDArray wide = Tensors.own(losses.toType(DataType.FLOAT64, false), temp);
            NDArray mean = Tensors.own(Tensors.own(wide.sum(), temp).div(Tensors.scalar(microBatches, wide, temp)), temp);
            NDArray unscaled = Tensors.own(mean.div(Tensors.scalar(scale, mean, temp)).reshape(1), temp);
            reduced = dp.allReduce(unscaled, ReduceOp.AVG, temp);
            reduced.attach(unreadLosses);
        }
        return () -> {
            checkUnread(reduced);
            double value = reduced.toDoubleArray()[0];
            reduced.close();
            return value;
        };
    }

    private static void checkUnread(NDArray loss) {
        if (loss.isReleased()) {
            throw new IllegalStateException("the step's loss was released with its TrainStep before it was read:"
                    + " read TrainStepResult.loss() before closing the step");
        }
    }

    private ScheduleResult schedule(List<MicroBatch> batches, double scale, boolean forwardOnly) {
        ScheduleResult result = Schedules.forwardBackward((scope, chunk, mb, input) -> {
            MicroBatch batch = model.readsData(chunk) ? batches.get(mb) : MicroBatch.NONE;
            NDArray output = model.forward(scope, chunk, input, batch);
            boolean last = groups.isLastStage() && chunk == model.numChunks() - 1;
            return last && scale != 1.0 ? Tensors.scale(output, scale, scope.manager()) : output;
        }, model.numChunks(), groups, manager, schedule.withForwardOnly(forwardOnly).withLossesOnDevice(!forwardOnly));
        return result;
    }

    /**
     * The mean of a last-stage value over the data- and context-parallel group (context-parallel
     * ranks hold parts of the same sequences; the model scales their losses so that this mean is
     * the loss of the whole sequences); NaN on other stages.
     */
    private double dataParallelMean(double value) {
        if (!groups.isLastStage()) {
            return Double.NaN;
        }
        Communicator dp = groups.dpCp();
        if (dp.size() == 1) {
            return value;
        }
        try (NDManager temp = manager.newSubManager()) {
            return dp.allReduce(temp.create(new double[] {value}), ReduceOp.AVG, temp).getDouble(0);
        }
    }

    private double mark() {
        if (timePhases) {
            Tensors.awaitDevice(manager);
        }
        return System.nanoTime() / 1e9;
    }

    /**
     * This rank's model and optimizer state for a checkpoint ({@link #MODEL_PREFIX}, {@link #OPTIMIZER_PREFIX}).
     * The optimizer's pieces are views owned by the optimizer until the next call.
     *
     * @return the pieces
     */
    public List<ShardedTensor> shardedState() {
        optimizer.finishParamSync(); // the model's pieces are views of its parameters
        List<ShardedTensor> state = new ArrayList<>();
        for (ShardedTensor t : model.shardedState(MODEL_PREFIX)) {
            if (!frozenKeys.contains(t.key())) {
                state.add(t);
            }
        }
        state.addAll(optimizer.shardedState(OPTIMIZER_PREFIX));
        Fp8Scaling fp8 = model.fp8Scaling();
        if (fp8 != null) {
            if (fp8Pieces != null) {
                fp8Pieces.close();
            }
            fp8Pieces = manager.newSubManager();
            // identical over the amax reduction's ranks (TP x DP x CP) after each update: one writer per stage
            boolean replica = groups.tp().rank() > 0 || groups.dpCp().rank() > 0;
            fp8.shardedState(FP8_PREFIX, fp8Pieces).forEach(t -> state.add(t.replicatedIf(replica)));
        }
        return state;
    }

    /**
     * Loads state read for the pieces {@link #shardedState()} described: the model's were read in
     * place; the optimizer copies its own (step count and loss scaler included), and so does the FP8
     * scaling state ({@link #FP8_PREFIX}).
     *
     * @param loaded what the checkpoint loader returned for those pieces
     */
    public void loadOptimizerState(List<ShardedTensor> loaded) {
        optimizer.loadShardedState(OPTIMIZER_PREFIX, loaded);
        Fp8Scaling fp8 = model.fp8Scaling();
        if (fp8 != null) {
            fp8.loadShardedState(FP8_PREFIX, loaded);
        }
    }

    /**
     * Writes every parameter whose all-gather the last iteration started and the next forward has not
     * yet written ({@link MegatronOptimizer#finishParamSync()}): afterwards the model holds the trained
     * weights. Nothing to do without {@link OptimizerConfig#overlapParamGather()}. Call it before
     * reading the model's weights between iterations other than through {@link #evaluate} or
     * {@link #shardedState()}, which call it themselves.
     */
    public void finishParamSync() {
        optimizer.finishParamSync();
    }

    /** @return the optimizer (its configuration, loss scale, state size) */
    public MegatronOptimizer optimizer() {
        return optimizer;
    }

    /** @return the model this step trains */
    public TrainingModel model() {
        return model;
    }

    /** @return this rank's groups */
    public ProcessGroups groups() {
        return groups;
    }

    /** @return micro-batches per iteration on each data-parallel replica */
    public int microBatches() {
        return microBatches;
    }

    /** @return samples per micro-batch */
    public int microBatchSize() {
        return microBatchSize;
    }

    /** @return tokens per sample */
    public int seqLength() {
        return seqLength;
    }

    /** @return samples per iteration, all data-parallel ranks together */
    public long globalBatchSize() {
        return (long) microBatches * microBatchSize * groups.dims().dataParallel();
    }

    /** Releases the optimizer state, the gradient buffers and the losses no result has read (not the model). */
    @Override
    public void close() {
        if (graph != null) {
            graph.close();
        }
        unreadLosses.close();
        if (fp8Pieces != null) {
            fp8Pieces.close();
        }
        optimizer.close(); // writes the pending parameters first
        ddp.close();
    }

    /** Options of a {@link TrainStep}; validated by {@link #build()}. */
    public static final class Builder {
        private final TrainingModel model;
        private final ProcessGroups groups;
        private final NDManager manager;
        private OptimizerConfig optimizer = OptimizerConfig.builder().build();
        private int microBatchSize = 1;
        private int seqLength = 1;
        private int microBatches = 1;
        private boolean timePhases;
        private CudaGraphConfig cudaGraph = CudaGraphConfig.NONE;

        private Builder(TrainingModel model, ProcessGroups groups, NDManager manager) {
            this.model = Objects.requireNonNull(model, "model");
            this.groups = Objects.requireNonNull(groups, "groups");
            this.manager = Objects.requireNonNull(manager, "manager");
        }

        /**
         * @param v optimizer, precision, gradient reduction and clipping settings
         * @return this builder
         */
        public Builder optimizer(OptimizerConfig v) {
            optimizer = Objects.requireNonNull(v, "optimizer");
            return this;
        }

        /**
         * @param v samples per micro-batch (Megatron's --micro-batch-size)
         * @return this builder
         */
        public Builder microBatchSize(int v) {
            microBatchSize = v;
            return this;
        }

        /**
         * @param v tokens per sample (--seq-length)
         * @return this builder
         */
        public Builder seqLength(int v) {
            seqLength = v;
            return this;
        }

        /**
         * Micro-batches per iteration from the global batch: {@code global / (micro x data-parallel size)}.
         *
         * @param globalBatchSize samples per iteration, all data-parallel ranks together (--global-batch-size)
         * @return this builder
         * @throws IllegalArgumentException if it does not divide
         */
        public Builder globalBatchSize(long globalBatchSize) {
            int dp = groups.dims().dataParallel();
            if (microBatchSize < 1 || globalBatchSize < 1 || globalBatchSize % ((long) microBatchSize * dp) != 0) {
                throw new IllegalArgumentException("global batch size " + globalBatchSize + " is not a positive multiple of"
                        + " micro-batch size " + microBatchSize + " x data-parallel size " + dp);
            }
            microBatches = Math.toIntExact(globalBatchSize / ((long) microBatchSize * dp));
            return this;
        }

        /**
         * @param v whether to synchronise the device between phases and report their times (slower)
         * @return this builder
         */
        public Builder timePhases(boolean v) {
            timePhases = v;
            return this;
        }

        /**
         * @param v whether steps after a warm-up replay their forward-backward from a CUDA graph; where the
         *          device has no graph support every step stays eager, with one line in the log
         * @return this builder
         */
        public Builder cudaGraph(CudaGraphConfig v) {
            cudaGraph = Objects.requireNonNull(v, "cudaGraph");
            return this;
        }

        /**
         * @return the step, with its data-parallel wrapper and optimizer created
         * @throws IllegalArgumentException naming a bad value
         */
        public TrainStep build() {
            if (microBatchSize < 1 || seqLength < 1 || microBatches < 1) {
                throw new IllegalArgumentException("micro-batch size " + microBatchSize + ", sequence length " + seqLength
                        + " and micro-batches per step " + microBatches + " must be positive");
            }
            if (model instanceof SingleStageModel && groups.dims().pipelineParallel() > 1) {
                throw new IllegalArgumentException("a single-stage model cannot run at pipeline-parallel size "
                        + groups.dims().pipelineParallel() + "; implement TrainingModel's chunks for pipelining");
            }
            if (optimizer.dataParallelShardingStrategy().shardsGradients() && groups.dims().pipelineParallel() > 1) {
                throw new IllegalArgumentException("--data-parallel-sharding-strategy "
                        + optimizer.dataParallelShardingStrategy().flag() + " does not compose with pipeline parallelism"
                        + " (--pipeline-model-parallel-size " + groups.dims().pipelineParallel() + "), as Megatron FSDP"
                        + " does not: its per-micro-batch reductions expect one backward pass at a time");
            }
            if (cudaGraph.enabled()) {
                Fp8Scaling fp8 = model.fp8Scaling();
                if (fp8 != null) {
                    // the graph replays each step's weight casts into the cached float8 copies, which must keep their
                    // memory across steps: delayed scaling with the fused cast recasts in place (Fp8Linear)
                    boolean inPlace = Fp8Kernels.get().castsInPlace(manager.getDevice());
                    if (fp8.config().recipe() != Fp8Recipe.DELAYED || !inPlace) {
                        throw new IllegalArgumentException("--cuda-graph-impl local takes --fp8-format only with the"
                                + " delayed recipe and mcore4j's fused FP8 cast on the device (the recipe is "
                                + fp8.config().recipe() + ", the device " + manager.getDevice()
                                + (inPlace ? "" : ", which has no fused cast") + ")");
                    }
                }
                if (optimizer.dataParallelShardingStrategy().shardsGradients()) {
                    throw new IllegalArgumentException("--cuda-graph-scope full_iteration and --data-parallel-sharding-strategy "
                            + optimizer.dataParallelShardingStrategy().flag() + " exclude each other for now: sharded"
                            + " gradients are reduced inside the backward the graph captures");
                }
            }
            return new TrainStep(this);
        }
    }
}
