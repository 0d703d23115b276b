package io.mcore4j.optimizer;

import static io.mcore4j.core.Tensors.own;
import static io.mcore4j.optimizer.FlatTensors.range;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.autograd.NoGrad;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.kernel.MasterAdamKernel;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.nn.ParameterResidency;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ProcessGroups;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link MegatronOptimizer} over the shards of the DDP wrapper's gradient buckets: for each bucket
 * a flat float32 master copy of this rank's shard (the whole bucket without the distributed
 * optimizer) and the update rule's moments of the same length. Buckets are uniform in weight decay
 * and in norm counting ({@link GradientBucket#decays}, {@link GradientBucket#countsInNorm}), so
 * every update is a handful of whole-shard tensor operations with no per-element masks.
 *
 * <p>A step makes these passes over each shard's gradient: the float16-to-float32 conversion where
 * the bucket reduces in float16; one read for the sum of squares (and one for the zero count when
 * configured), taken on the still loss-scaled values; the update rule, which receives every
 * shard in one {@link UpdateRule#applyAll} call with the divisor {@code lossScale / clipCoefficient}:
 * the fused Adam kernel unscales, clips and decays inside its one pass (two launches, one per
 * weight decay), other rules multiply first. Numbers enter these passes as 0-dim device tensors made once per step
 * ({@link Tensors#scalar}): a Java number operand would cost a host-to-device copy per shard,
 * each waiting for the queued kernels.
 *
 * <p><b>Fused kernel.</b> Where the parameters' device has a {@link MasterAdamKernel} (CUDA, with
 * {@code mcore4j-cuda} on the class path) and the step allows it (fused Adam or AdamW, no
 * distributed-optimizer shard, no zero count), a step is instead one statistics pass and one update
 * pass per bucket that read each gradient where the DDP wrapper left it (a parameter's own
 * {@code .grad} when nothing was reduced) and write the new weights straight into the model: no
 * float32 copy of the gradients and no per-parameter copy back. Same math (torch's fused Adam order
 * of operations) to float32 rounding; {@code -Dmcore4j.cuda.kernels=false} turns it off.
 *
 * <p><b>CPU offload.</b> With {@link OptimizerConfig#optimizerCpuOffload()} the shards that
 * {@link HostPlacement} picks keep their master and moments on the host. The statistics are taken on
 * the device as without offload; then their gradients are copied to the host, the device's shards
 * are updated (queued on the device), the host's shards are updated on the host meanwhile, and their
 * new parameters cross back cast to the parameters' dtype on the host, one copy per bucket (before the
 * all-gather with the distributed optimizer). The update of each shard is the same sequence of elementwise
 * operations wherever it runs, and the checkpoint describes the same tensors: a run saved with
 * offload resumes without it and vice versa. The fused kernel above is not used while a shard is on
 * the host.
 *
 * <p><b>Parameter all-gather.</b> With the distributed optimizer the updated shards reach the model
 * through {@link ParamGather}, chosen once here: gathered and written during the step, or with
 * {@link OptimizerConfig#overlapParamGather()} started during the step and written bucket by bucket
 * as the next forward reaches them ({@link #beforeForward}); {@link #finishParamSync()} writes what is
 * left. The step, {@link #reloadModelParams()}, loading and {@link #close()} finish the gathers first.
 */
final class MasterWeightOptimizer implements MegatronOptimizer {
    private static final Logger LOG = LoggerFactory.getLogger(MasterWeightOptimizer.class);
    private static final String MASTER = "fp32_param";
    private static final String STEP = "step";
    private static final String LOSS_SCALER = "loss_scaler";

    /** A parameter's flat range {@code [paramStart, paramEnd)} held at {@code shardStart} of a shard. */
    private record Piece(Parameter param, long paramStart, long paramEnd, long shardStart) {}

    /** Optimizer state of one bucket shard. */
    private static final class Shard {
        final GradientBucket bucket;
        /** Whether master and state live on the host ({@link HostPlacement}). */
        final boolean onHost;
        final List<Piece> pieces;
        final NDArray master;
        final List<NDArray> state;
        /** Per slot, the master's range shaped like the parameter; empty when the master is a shard or on the host. */
        final List<NDArray> slotViews;

        Shard(GradientBucket bucket, boolean onHost, List<Piece> pieces, NDArray master, List<NDArray> state,
              List<NDArray> slotViews) {
            this.bucket = bucket;
            this.onHost = onHost;
            this.pieces = pieces;
            this.master = master;
            this.state = List.copyOf(state);
            this.slotViews = List.copyOf(slotViews);
        }
    }

    private final DistributedDataParallel ddp;
    private final ProcessGroups groups;
    private final OptimizerConfig config;
    private final ParameterLayout layout;
    private final UpdateRule rule;
    /** The fused master-weight Adam kernel for the parameters' device, or null to compose the step from {@link #rule}. */
    private final MasterAdamKernel.Bound kernel;
    private final DynamicLossScaler scaler;
    private final NDManager manager;
    private final HostPlacement host;
    private final ParamGather gather;
    /** Shard indices in the order {@link #gather} wants them published. */
    private final int[] publishOrder;
    private final List<Shard> shards = new ArrayList<>();
    private NDManager checkpointViews;
    private long stepCount;
    private long lastSyncStepped = -1;

    MasterWeightOptimizer(DistributedDataParallel ddp, ProcessGroups groups, OptimizerConfig config, ParameterLayout layout) {
        this.ddp = ddp;
        this.groups = groups;
        this.config = config;
        this.layout = layout;
        requireHalfPrecisionMatches(ddp.buckets(), config);
        this.scaler = config.fp16() ? DynamicLossScaler.from(config) : null;
        this.manager = ddp.manager().newSubManager();
        this.rule = UpdateRule.of(config, manager);
        this.manager.setName("optimizer-state");
        List<Long> numels = new ArrayList<>();
        for (GradientBucket bucket : ddp.buckets()) {
            numels.add(bucket.shardNumel);
        }
        this.host = HostPlacement.of(numels, config, manager);
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            for (GradientBucket bucket : ddp.buckets()) {
                boolean onHost = host.onHost(shards.size());
                NDManager owner = onHost ? host.manager() : manager;
                List<Piece> pieces = piecesOf(bucket);
                NDArray values = masterValues(bucket, pieces, temp);
                NDArray master = onHost ? HostPlacement.toHost(values, owner) : own(values, owner);
                NDArray[] state = new NDArray[rule.stateNames().size()];
                for (int i = 0; i < state.length; i++) {
                    state[i] = owner.zeros(new Shape(bucket.shardNumel), DataType.FLOAT32);
                }
                // the master never moves (updates and loads write into it), so views made once stay valid
                List<NDArray> slotViews = new ArrayList<>();
                if (!sharded(bucket) && !onHost) {
                    for (GradientBucket.Slot slot : bucket.slots) {
                        NDArray view = range(master, slot.offset(), slot.offset() + slot.numel(), owner);
                        slotViews.add(own(view.reshape(slot.param().data().getShape()), owner));
                    }
                }
                shards.add(new Shard(bucket, onHost, pieces, master, Arrays.asList(state), slotViews));
            }
        }
        this.kernel = fusedKernel();
        this.gather = config.dataParallelShardingStrategy().shardsParameters()
                ? new ShardedParamGather(ddp.buckets(), (bucket, owner) -> workingShard(shards.get(bucket.index), owner, owner),
                        manager)
                : ParamGather.of(config, ddp);
        this.publishOrder = gather.publishOrder(ddp.buckets());
    }

    /**
     * The device's fused master-weight Adam kernel ({@link Kernels#find}) where this step
     * can use it: fused Adam or AdamW, every bucket's master weights whole on this rank (no
     * distributed-optimizer shard, which needs an all-gather before the model's weights are written),
     * no zero count (which the kernel does not make) and no shard on the host.
     */
    private MasterAdamKernel.Bound fusedKernel() {
        boolean adam = config.algorithm() == OptimizerConfig.Algorithm.ADAM || config.algorithm() == OptimizerConfig.Algorithm.ADAMW;
        if (!adam || !config.fusedAdam() || config.countZerosInGrad() || shards.isEmpty() || host.any()) {
            return null;
        }
        for (Shard s : shards) {
            if (sharded(s.bucket)) {
                return null;
            }
        }
        MasterAdamKernel kernel = Kernels.find(MasterAdamKernel.class, shards.get(0).master.getDevice()).orElse(null);
        if (kernel == null) {
            return null;
        }
        List<MasterAdamKernel.Bucket> buckets = new ArrayList<>(shards.size());
        for (Shard s : shards) {
            List<MasterAdamKernel.Segment> segments = new ArrayList<>(s.bucket.slots.size());
            for (GradientBucket.Slot slot : s.bucket.slots) {
                segments.add(new MasterAdamKernel.Segment(slot.param().data(), slot.offset(), slot.numel()));
            }
            buckets.add(new MasterAdamKernel.Bucket(s.master, s.state.get(0), s.state.get(1), segments,
                    s.bucket.countsInNorm, s.bucket.decays));
        }
        return kernel.bind(buckets);
    }

    @Override
    public StepResult step(double learningRate, double weightDecay) {
        if (!(learningRate >= 0) || !(weightDecay >= 0) || Double.isInfinite(learningRate) || Double.isInfinite(weightDecay)) {
            throw new IllegalArgumentException("learning rate " + learningRate + " and weight decay " + weightDecay
                    + " must be finite and >= 0");
        }
        gather.beforeStep(); // the last step's gathers read the masters this step updates
        if (!ddp.isGradSynced()) {
            throw new IllegalStateException("gradients are not synchronised: call finishGradSync() after the last backward");
        }
        if (ddp.syncCount() == lastSyncStepped) {
            throw new IllegalStateException("step() already consumed these gradients; call zeroGrad(), run the next"
                    + " backward and finishGradSync() first");
        }
        lastSyncStepped = ddp.syncCount();
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager();
             NDManager hostTemp = host.manager().newSubManager()) {
            double scale = lossScale();
            MasterAdamKernel.Gradients fused = kernel != null ? kernel.gradients(kernelGradients(temp)) : null;
            NDArray[] grads = fused != null ? null : widenedGradients(temp);
            // statistics of the still scaled gradients: the squares shrink by scale^2 afterwards,
            // and a gradient is finite exactly when its scaled value is
            double[] stats = GradientNorm.sumOverWorld(fused != null
                    ? List.of(List.of(fused.sumOfSquares(temp)), List.of())
                    : localStatistics(grads, temp), groups, temp);
            boolean foundInf = !Double.isFinite(stats[0]);
            if (scaler != null) {
                scaler.update(foundInf);
            }
            if (foundInf) {
                if (groups.worldRank() == 0) {
                    LOG.warn("skipping optimizer step {}: inf/NaN in the gradients; loss scale {} -> {}",
                            stepCount + 1, scale, lossScale());
                }
                return new StepResult(true, Double.NaN, lossScale(), -1);
            }
            double norm = Math.sqrt(stats[0]) / scale;
            double coefficient = config.clipGrad() > 0
                    ? Math.min(1, GradientNorm.clipCoefficient(config.clipGrad(), norm)) : 1;
            stepCount++;
            if (fused != null) {
                // one pass: unscale and clip (the divisor), update, and write the model's weights
                fused.step(new MasterAdamKernel.Step(learningRate, config.beta1(), config.beta2(), config.eps(),
                        weightDecay, config.algorithm() == OptimizerConfig.Algorithm.ADAMW, stepCount, scale / coefficient));
                return new StepResult(false, norm, lossScale(), -1);
            }
            List<UpdateRule.ShardUpdate> onDevice = new ArrayList<>(grads.length);
            List<UpdateRule.ShardUpdate> onHost = new ArrayList<>();
            for (int i = 0; i < grads.length; i++) {
                Shard s = shards.get(i);
                // the host's gradients cross first: each copy waits for the device's queued work,
                // so the device's updates are queued after them and run while the host updates
                NDArray g = s.onHost ? HostPlacement.toHost(grads[i], hostTemp) : grads[i];
                (s.onHost ? onHost : onDevice).add(new UpdateRule.ShardUpdate(s.master, g, s.state,
                        s.bucket.decays ? weightDecay : 0));
            }
            // unscaling and clipping are one division, which the rule makes (the fused kernel inside its pass)
            rule.applyAll(onDevice, learningRate, stepCount, scale / coefficient, temp);
            rule.applyAll(onHost, learningRate, stepCount, scale / coefficient, hostTemp);
            publish(temp, hostTemp);
            return new StepResult(false, norm, lossScale(), config.countZerosInGrad() ? Math.round(stats[1]) : -1);
        }
    }

    /** Each shard's synchronised gradient, widened to float32. */
    private NDArray[] widenedGradients(NDManager temp) {
        NDArray[] grads = new NDArray[shards.size()];
        for (int i = 0; i < grads.length; i++) {
            NDArray g = ddp.syncedShard(i);
            if (g.getDataType() != DataType.FLOAT32) {
                g = own(g.toType(DataType.FLOAT32, true), temp);
            }
            grads[i] = g;
        }
        return grads;
    }

    /**
     * Per shard, per parameter, the gradient where the DDP wrapper left it: its {@code .grad} (null
     * if none) when the bucket is synchronised in place, else its range of the synchronised buffer.
     */
    private List<List<NDArray>> kernelGradients(NDManager temp) {
        List<List<NDArray>> out = new ArrayList<>(shards.size());
        for (int i = 0; i < shards.size(); i++) {
            Shard s = shards.get(i);
            boolean inPlace = ddp.gradientsInPlace(i);
            NDArray flat = inPlace ? null : ddp.syncedShard(i);
            List<NDArray> grads = new ArrayList<>(s.bucket.slots.size());
            for (GradientBucket.Slot slot : s.bucket.slots) {
                grads.add(inPlace ? slot.param().gradient(temp) : range(flat, slot.offset(), slot.offset() + slot.numel(), temp));
            }
            out.add(grads);
        }
        return out;
    }

    /**
     * The scalar tensors of {sum of squares of the counted shards' elements (inf or NaN if any element of any shard
     * is not finite), zeros among them}, of the gradients as given (still loss-scaled), for
     * {@link GradientNorm#sumOverWorld}.
     */
    private List<List<NDArray>> localStatistics(NDArray[] grads, NDManager temp) {
        List<NDArray> squares = new ArrayList<>();
        List<NDArray> zeros = new ArrayList<>();
        NDArray zero = null;
        for (int i = 0; i < grads.length; i++) {
            NDArray g = grads[i];
            if (shards.get(i).bucket.countsInNorm) {
                squares.add(own(g.dot(g), temp));
                if (config.countZerosInGrad()) {
                    zeros.add(own(own(g.eq(0), temp).sum(), temp));
                }
            } else {
                // nothing counts here, but inf/NaN must still be noticed: times 0, the plain sum
                // is NaN when one is present and 0 otherwise (a finite sum could overflow only for
                // values whose counted copy on another rank overflows the sum of squares first)
                if (zero == null) {
                    zero = Tensors.scalar(0, g, temp);
                }
                squares.add(own(g.sum(), temp).muli(zero));
            }
        }
        return List.of(squares, zeros);
    }

    /**
     * Copies the master weights into the model parameters, all-gathering the shards first with the
     * distributed optimizer. A host shard is cast to the parameters' dtype on the host
     * ({@code hostTemp}) and crosses to the device in one copy per bucket ({@code temp}); the
     * parameters are then written from device views, as a device shard's are.
     */
    private void publish(NDManager temp, NDManager hostTemp) {
        for (int index : publishOrder) {
            Shard s = shards.get(index);
            GradientBucket bucket = s.bucket;
            if (!sharded(bucket) && !s.onHost) {
                // one copy per parameter from its ready-made view (the step's host time is mostly these calls)
                for (int i = 0; i < bucket.slots.size(); i++) {
                    Tensors.copyInto(bucket.slots.get(i).param().data(), s.slotViews.get(i));
                }
                continue;
            }
            // a gathered bucket's shard lives until the gather has written it (ParamGather closes its manager)
            NDManager buffers = sharded(bucket) ? manager.newSubManager() : temp;
            NDArray local = workingShard(s, buffers, hostTemp);
            if (sharded(bucket)) {
                gather.publish(bucket, local, buffers);
            } else {
                ParamGather.writeParameters(bucket, local, temp);
            }
        }
    }

    /**
     * This rank's master shard in the parameters' dtype on their device: the master itself for float32,
     * else a cast owned by {@code owner} (made on the host by {@code hostTemp} for a host shard, which then
     * crosses to the device in one copy).
     */
    private NDArray workingShard(Shard s, NDManager owner, NDManager hostTemp) {
        GradientBucket bucket = s.bucket;
        NDArray local = bucket.paramDtype == DataType.FLOAT32 ? s.master
                : own(DataTypes.toType(s.master, bucket.paramDtype, false), s.onHost ? hostTemp : owner);
        if (s.onHost) {
            // DataTypes' copy: DJL's own, which a cross-device write would make, fails on bfloat16
            local = own(DataTypes.toDevice(local, bucket.slots.get(0).param().data().getDevice(), true), owner);
        }
        return local;
    }

    @Override
    public void beforeForward(List<Parameter> parameters) {
        gather.beforeForward(parameters);
    }

    @Override
    public ParameterResidency parameterResidency() {
        return gather instanceof ShardedParamGather sharded ? sharded : null;
    }

    @Override
    public void finishParamSync() {
        gather.finish();
    }

    /** @return whether this rank holds only a shard of the bucket's master weights (distributed optimizer) */
    private boolean sharded(GradientBucket bucket) {
        return config.useDistributedOptimizer() && bucket.group.size() > 1;
    }

    /**
     * A half-precision parameter must match the configured precision: float16 needs the loss scaling
     * of {@code fp16}, and a bfloat16 model run with {@code fp16} would scale a loss that never
     * needed it (and one with neither flag would be stepped as if float32 was the plan).
     */
    private static void requireHalfPrecisionMatches(List<GradientBucket> buckets, OptimizerConfig config) {
        for (GradientBucket bucket : buckets) {
            DataType dtype = bucket.paramDtype;
            boolean ok = dtype == DataType.FLOAT32 || dtype == DataType.FLOAT64
                    || (dtype == DataType.FLOAT16 && config.fp16()) || (dtype == DataType.BFLOAT16 && config.bf16());
            if (!ok) {
                throw new IllegalArgumentException("parameters of dtype " + dtype + " (" + bucket.slots.get(0).param()
                        + ", ...) do not match the optimizer's precision " + config.precision() + ": use "
                        + (dtype == DataType.FLOAT16 ? "fp16(true)" : "bf16(true)") + " for " + dtype + " parameters");
            }
        }
    }

    @Override
    public double lossScale() {
        return scaler == null ? 1.0 : scaler.scale();
    }

    @Override
    public void zeroGrad(boolean setToNone) {
        ddp.zeroGrad(setToNone);
    }

    @Override
    public OptimizerConfig config() {
        return config;
    }

    @Override
    public long stepCount() {
        return stepCount;
    }

    @Override
    public long stateBytes() {
        return stateBytes(false) + stateBytes(true);
    }

    @Override
    public long hostStateBytes() {
        return stateBytes(true);
    }

    private long stateBytes(boolean onHost) {
        long bytes = 0;
        for (Shard s : shards) {
            if (s.onHost != onHost) {
                continue;
            }
            bytes += bytes(s.master);
            for (NDArray t : s.state) {
                bytes += bytes(t);
            }
        }
        return bytes;
    }

    /**
     * Per shard, in the optimizer's order, its master and state tensors and whether the host
     * manager owns each: what the tests read to check where the state lives.
     *
     * @return per shard, {@code [placed on host, master owned by the host manager, each state tensor owned by it]}
     */
    List<boolean[]> placements() {
        List<boolean[]> out = new ArrayList<>(shards.size());
        for (Shard s : shards) {
            boolean[] row = new boolean[2 + s.state.size()];
            row[0] = s.onHost;
            row[1] = host.owns(s.master);
            for (int t = 0; t < s.state.size(); t++) {
                row[2 + t] = host.owns(s.state.get(t));
            }
            out.add(row);
        }
        return out;
    }

    private static long bytes(NDArray t) {
        return t.getShape().size() * DataTypes.of(t).getNumOfBytes();
    }

    @Override
    public void reloadModelParams() {
        gather.finish();
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            for (Shard s : shards) {
                Tensors.copyInto(s.master, masterValues(s.bucket, s.pieces, temp));
            }
        }
    }

    @Override
    public List<ShardedTensor> shardedState(String prefix) {
        releaseCheckpointViews();
        checkpointViews = manager.newSubManager();
        return shardedState(prefix, layout, checkpointViews);
    }

    @Override
    public List<ShardedTensor> shardedState(String prefix, ParameterLayout layout, NDManager owner) {
        List<String> names = new ArrayList<>();
        names.add(MASTER);
        names.addAll(rule.stateNames());
        List<ShardedTensor> out = new ArrayList<>();
        try (NoGrad off = NoGrad.enter()) {
            for (Shard s : shards) {
                NDArray[] tensors = new NDArray[names.size()];
                tensors[0] = s.master;
                for (int t = 0; t < s.state.size(); t++) {
                    tensors[t + 1] = s.state.get(t);
                }
                for (Piece piece : s.pieces) {
                    describe(prefix, layout, piece, !s.bucket.countsInNorm, names, tensors, owner, out);
                }
            }
            int replica = groups.worldRank() == 0 ? 0 : 1;
            out.add(ShardedTensor.whole(prefix + STEP, owner.create(new long[] {stepCount})).replicatedIf(replica != 0));
            if (scaler != null) {
                double[] st = scaler.state();
                float[] values = {(float) st[0], (float) st[1], (float) st[2]};
                out.add(ShardedTensor.whole(prefix + LOSS_SCALER, owner.create(values)).replicatedIf(replica != 0));
            }
        }
        return out;
    }

    /**
     * Appends the rectangles of one parameter piece, for every state tensor: the piece's flat range
     * is cut into rectangles of the parameter ({@link FlatRangeBlocks}), and each is cut again by the
     * regions of the parameter's placement (one region unless the parameter is strided), which give
     * the global offsets. {@code replicated} (the piece's gradient does not count in the norm here)
     * marks them as held by another rank too.
     */
    private static void describe(String prefix, ParameterLayout layout, Piece piece, boolean replicated,
                                 List<String> names, NDArray[] tensors, NDManager owner, List<ShardedTensor> out) {
        Parameter p = piece.param();
        ParameterPlacement d = layout.describe(p);
        if (d.numel() != p.data().getShape().size()) {
            throw new IllegalArgumentException("checkpoint placement " + d + " of parameter " + p
                    + " does not have the parameter's " + p.data().getShape().size() + " elements");
        }
        int replica = d.replicaId() != 0 ? d.replicaId() : replicated ? 1 : 0;
        for (FlatRangeBlocks.Block block : FlatRangeBlocks.decompose(d.localShape(), piece.paramStart(), piece.paramEnd())) {
            long start = piece.shardStart() + block.flatStart() - piece.paramStart();
            for (ParameterPlacement.Region region : d.regions()) {
                Optional<ParameterPlacement.Region> part = region.within(block.offset(), block.extent());
                if (part.isEmpty()) {
                    continue;
                }
                for (int t = 0; t < tensors.length; t++) {
                    NDArray flat = range(tensors[t], start, start + block.numel(), owner);
                    NDArray view = narrow(own(flat.reshape(block.extent()), owner), block, part.get(), owner);
                    flat.close();
                    out.add(new ShardedTensor(prefix + d.key() + "." + names.get(t), view, d.globalShape(),
                            part.get().globalOffset(), replica));
                }
            }
        }
    }

    /**
     * The view of {@code part} within {@code blockView}, the view of {@code block}; the block's own
     * view where the part is the whole block (always so for a parameter of one region).
     */
    private static NDArray narrow(NDArray blockView, FlatRangeBlocks.Block block, ParameterPlacement.Region part,
                                  NDManager owner) {
        NDArray view = blockView;
        for (int k = 0; k < block.extent().length; k++) {
            long from = part.localOffset()[k] - block.offset()[k];
            if (from == 0 && part.extent()[k] == block.extent()[k]) {
                continue;
            }
            NDArray narrowed = Tensors.narrow(view, k, from, from + part.extent()[k]);
            narrowed.attach(owner);
            view.close();
            view = narrowed;
        }
        return view;
    }

    @Override
    public void loadShardedState(String prefix, List<ShardedTensor> loaded) {
        loadShardedState(prefix, layout, loaded);
    }

    @Override
    public void loadShardedState(String prefix, ParameterLayout layout, List<ShardedTensor> loaded) {
        gather.finish(); // a bucket written after the load would overwrite the loaded weights
        Map<String, ShardedTensor> byPlace = new HashMap<>();
        for (ShardedTensor t : loaded) {
            byPlace.put(place(t), t);
        }
        try (NoGrad off = NoGrad.enter(); NDManager temp = manager.newSubManager()) {
            List<ShardedTensor> wanted = shardedState(prefix, layout, temp);
            List<ShardedTensor> found = new ArrayList<>(wanted.size());
            // check everything before writing anything, so a failed load leaves the state as it was
            for (ShardedTensor want : wanted) {
                ShardedTensor got = byPlace.get(place(want));
                if (got == null) {
                    throw new IllegalArgumentException("optimizer state " + want.key() + " at global offset "
                            + Arrays.toString(want.globalOffset()) + " of shape " + want.data().getShape()
                            + " is missing from the " + loaded.size() + " loaded tensors");
                }
                if (!got.data().getShape().equals(want.data().getShape())) {
                    throw new IllegalArgumentException("optimizer state " + want.key() + " at global offset "
                            + Arrays.toString(want.globalOffset()) + " was loaded with shape " + got.data().getShape()
                            + "; expected " + want.data().getShape());
                }
                found.add(got);
            }
            for (int i = 0; i < wanted.size(); i++) {
                ShardedTensor want = wanted.get(i);
                NDArray source = found.get(i).data();
                if (want.key().equals(prefix + STEP)) {
                    stepCount = own(source.toType(DataType.INT64, true), temp).getLong();
                } else if (want.key().equals(prefix + LOSS_SCALER)) {
                    scaler.restore(own(source.toType(DataType.FLOAT64, true), temp).toDoubleArray());
                } else {
                    Tensors.copyInto(want.data(), source);
                }
            }
        }
    }

    private static String place(ShardedTensor t) {
        return t.key() + "@" + Arrays.toString(t.globalOffset());
    }

    @Override
    public void close() {
        try {
            gather.finish();
        } finally {
            releaseCheckpointViews();
            manager.close();
        }
    }

    private void releaseCheckpointViews() {
        if (checkpointViews != null) {
            checkpointViews.close();
            checkpointViews = null;
        }
    }

    /** The parameter ranges that fall inside this rank's shard of {@code bucket}. */
    private static List<Piece> piecesOf(GradientBucket bucket) {
        long lo = bucket.shardOffset;
        long hi = bucket.shardOffset + bucket.shardNumel;
        List<Piece> pieces = new ArrayList<>();
        for (GradientBucket.Slot slot : bucket.slots) {
            long start = Math.max(slot.offset(), lo);
            long end = Math.min(slot.offset() + slot.numel(), hi);
            if (start < end) {
                pieces.add(new Piece(slot.param(), start - slot.offset(), end - slot.offset(), start - lo));
            }
        }
        return List.copyOf(pieces);
    }

    /** Elements of the shard that lie in the bucket's padding. */
    private static long paddingInShard(GradientBucket bucket) {
        long start = Math.max(bucket.numel, bucket.shardOffset);
        return Math.max(0, bucket.shardOffset + bucket.shardNumel - start);
    }

    /** The current parameter values of the shard as float32, in {@code temp}. */
    private static NDArray masterValues(GradientBucket bucket, List<Piece> pieces, NDManager temp) {
        NDList parts = new NDList();
        for (Piece piece : pieces) {
            NDArray flat = own(piece.param().data().reshape(-1), temp);
            NDArray part = range(flat, piece.paramStart(), piece.paramEnd(), temp);
            parts.add(own(part.toType(DataType.FLOAT32, false), temp));
        }
        long padding = paddingInShard(bucket);
        if (padding > 0) {
            parts.add(temp.zeros(new Shape(padding), DataType.FLOAT32));
        }
        return own(parts.size() == 1 ? parts.get(0).duplicate() : NDArrays.concat(parts), temp);
    }
}
