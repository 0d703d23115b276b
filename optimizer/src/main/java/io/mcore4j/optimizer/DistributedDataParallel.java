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
import io.mcore4j.core.kernel.BucketFillKernel;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.core.Mcore4j;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.GradientReadyListener;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.ReduceOp;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Data-parallel gradient synchronisation in contiguous buckets, run once per step after the last
 * backward of the schedule (gradients of all micro-batches accumulate in each parameter's
 * {@code .grad} until then).
 *
 * <p>{@link #finishGradSync()} does, in this order:
 * <ol>
 *   <li>sums the gradients of {@link Parameter.Kind#SEQUENCE_PARALLEL} parameters over the
 *       tensor-parallel group, in one coalesced in-place all-reduce;</li>
 *   <li>sums the gradients of the shared (tied) embedding parameters over
 *       {@link ProcessGroups#embedding()} (first and last pipeline stage), in one in-place all-reduce;</li>
 *   <li>for each bucket in turn: allocates its flat buffer once (the bucket's gradient dtype,
 *       float32 unless {@link OptimizerConfig#gradReduceInFp32()} is off; padded length), copies
 *       each parameter's gradient (its sum from step 1 or 2 where it has one) straight into its
 *       slice, casting in the same copy, writes zeros into the padding and the slices of parameters
 *       that have no gradient, and averages the buffer with one collective over
 *       {@link ProcessGroups#dpCp()} (expert parameters: {@link ProcessGroups#expertDp()}): an
 *       in-place all-reduce, or with the distributed optimizer a reduce-scatter that leaves this
 *       rank only its shard. The bucket's temporaries are released before the next bucket.</li>
 * </ol>
 * Steps 1 and 2 are sums and step 3 a mean, so doing the sums first gives Megatron's result
 * (which sums after averaging) and lets the reduce-scatter of step 3 stay the last word on each shard.
 *
 * <p>Without the distributed optimizer, every parameter's {@code .grad} holds the synchronised
 * gradient afterwards: the buffer is written back into it, except where that would write the
 * values {@code .grad} already holds, namely when the bucket's group and {@link ProcessGroups#dpCp()}
 * both have one rank (nothing is averaged) and the parameter had no sum from step 1 or 2; those
 * parameters are skipped (float16 and bfloat16 values pass through a float32 buffer unchanged).
 * A parameter that no backward reached on this rank (its {@code .grad} is none, read as zeros)
 * is given a copy of its synchronised slice as its {@code .grad}, unless it is skipped.
 * With the distributed optimizer, {@code .grad} keeps the local accumulation and only the shard is reduced.
 *
 * <p><b>Overlap with backward.</b> With {@link OptimizerConfig#overlapGradReduce()}, a step armed by
 * {@link #expectBackwardPasses(int)} starts a bucket's step 3 as soon as every one of its
 * parameters has been reported complete that many times through {@link #gradientsReady} (the
 * model's backward reports each layer as it leaves it): the copies run on the caller's stream, the
 * collective with {@link Communicator#startAllReduceInPlace} / {@link Communicator#startReduceScatter}
 * (a second stream with NCCL) while backward goes on. {@link #finishGradSync()} then waits for the
 * started buckets and runs the others as above. Buckets holding parameters with a sum from step 1 or
 * 2 always wait for {@link #finishGradSync()}. The results are the same as without overlap; only
 * the time at which the collectives run changes.
 *
 * <p><b>Sharded gradients (ZeRO-2).</b> With {@link DataParallelShardingStrategy#OPTIM_GRADS}
 * ({@link OptimizerConfig#dataParallelShardingStrategy()}), a step armed by
 * {@link #expectBackwardPasses(int)} (whatever {@link OptimizerConfig#overlapGradReduce()} says)
 * reduces a bucket once per backward pass: as soon as every one of its parameters has been reported
 * through {@link #gradientsReady} in that pass, step 3 runs on the pass's gradients (a reduce-scatter,
 * started as with the overlap), the parameters' {@code .grad}s are released at once (their storage
 * emptied, {@link TensorMemory#releaseStorage}, and each parameter's gradient set to none), and the
 * shard is added to this rank's running sum of the step's shards once two later bucket reductions have
 * started (or at {@link #finishGradSync()}). A bucket thus holds its full gradients only from its pass's
 * backward to its reduction, and at most two full buffers are in flight; between passes only the shard
 * sums live. Buckets that wait for pre-sums
 * (sequence-parallel and shared embedding parameters) and gradients no report covers (a bucket whose first pass
 * never completed when one of its parameters is reported for the second) are reduced by
 * {@link #finishGradSync()} from their {@code .grad}s and added to the same sum. Each pass is averaged
 * on its own, so the result equals the reduction of the accumulated gradients up to float rounding.
 *
 * <p><b>Under a CUDA graph.</b> A step whose forward and backward a CUDA graph replays can have the graph hold the
 * synchronisation too, overlapped reductions included: the captured body arms the step, runs the schedule, calls
 * {@link #finishGradSync()} and then {@link #pinSynced()}, which keeps the buffers it made; every replay remakes
 * them in the same memory, and {@link #restorePinned()} hands them out as the step's synchronised gradients.
 *
 * <p><b>Ownership.</b> The synchronised buffers live in a manager that is a child of
 * the parent given to the constructor (by default the first parameter's manager); {@link #zeroGrad()}
 * releases them and sets every {@code .grad} to none ({@link #zeroGrad(boolean)} can zero them instead). The optimizer reads (and unscales and clips in
 * place) the synchronised buffers between {@link #finishGradSync()} and {@link #zeroGrad()}. All
 * ranks of each group must call {@link #finishGradSync()} together. One instance is used by one thread.
 */
public final class DistributedDataParallel implements GradientReadyListener, AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(DistributedDataParallel.class);

    private final List<Parameter> params;
    private final ProcessGroups groups;
    private final OptimizerConfig config;
    private final List<Parameter> sharedEmbedding;
    private final Set<Parameter> sharedEmbeddingSet;
    private final List<Parameter> sequenceParallel;
    private final List<GradientBucket> buckets;
    private final NDManager manager;
    private final boolean ownsRoot;
    /** The one-pass fill of the buckets where the device has one (CUDA), else null: the composed fill. */
    private final BucketFillKernel fillKernel;
    private final Map<Parameter, GradientBucket> bucketOf = new IdentityHashMap<>();
    private final boolean[] waitsForPreSums;
    private NDManager syncManager;
    private NDArray[] synced;
    private long syncCount;
    // the synchronised buffers a CUDA graph remakes in every replay (pinSynced), and the manager they live in
    private NDManager pinnedManager;
    private NDArray[] pinnedSynced;
    // overlap state of the armed step: reports per parameter, parameters still incomplete per bucket
    private int expectedPasses;
    private final Map<Parameter, Integer> reports = new IdentityHashMap<>();
    private int[] incomplete;
    private InFlight[] inFlight;
    private NDManager stepManager;
    // ZeRO-2 state of the armed step, per bucket: passes reduced, parameters reported in the current
    // pass, the last pass's pending reduction and the sum of the shards of the passes before it
    private final boolean shardsGradients;
    private int[] passesReduced;
    private int[] reportedInPass;
    /** Per bucket: it holds a parameter no report covers, found when another was reported for a second pass. */
    private boolean[] unreported;
    private InFlight[] lastPass;
    private NDArray[] shardSum;
    /** Buckets whose last pass is started but not yet added, oldest first. */
    private final ArrayDeque<Started> passesInFlight = new ArrayDeque<>();
    /** How many {@link #gradientsReady} calls the armed step has had. */
    private long reportCount;
    /**
     * Reports whose per-pass reductions are left running while backward goes on: each reduction holds its
     * bucket's full buffer, so those a report older than that started are added (the caller's stream waits
     * for them) as a newer report starts its own. Counted in reports (a layer's backward each), not buckets,
     * so that the stream never waits for a reduction the same report started, which has had no backward to
     * overlap.
     */
    public static final int REPORTS_IN_FLIGHT = 2;

    /** A bucket's per-pass reduction in flight, and the report (the count of {@link #gradientsReady} calls) that started it. */
    private record Started(int bucket, long report) {}

    /** A bucket whose reduction was started: the buffers it uses and the pending collective. */
    private record InFlight(NDManager buffers, NDArray flat, boolean scatter, PendingCollective pending) {}

    /**
     * Plans the buckets for {@code params}; state lives under the first parameter's manager.
     *
     * @param params this rank's parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, whether the distributed optimizer shards
     * @param sharedEmbeddingParams parameters tied across the first and last pipeline stage (empty if none)
     * @throws IllegalArgumentException if a parameter repeats, is not floating point, or a shared one is not among {@code params}
     */
    public DistributedDataParallel(List<Parameter> params, ProcessGroups groups, OptimizerConfig config,
                                   List<Parameter> sharedEmbeddingParams) {
        this(params, groups, config, sharedEmbeddingParams, null);
    }

    /**
     * Plans the buckets for {@code params}.
     *
     * @param params this rank's parameters, each once
     * @param groups this rank's groups
     * @param config bucket size, reduction dtype, whether the distributed optimizer shards
     * @param sharedEmbeddingParams parameters tied across the first and last pipeline stage (empty if none)
     * @param parent manager whose child owns the synchronised buffers; null for the first parameter's manager
     */
    public DistributedDataParallel(List<Parameter> params, ProcessGroups groups, OptimizerConfig config,
                                   List<Parameter> sharedEmbeddingParams, NDManager parent) {
        this.params = List.copyOf(params);
        this.groups = Objects.requireNonNull(groups, "groups");
        this.config = Objects.requireNonNull(config, "config");
        this.sharedEmbedding = List.copyOf(sharedEmbeddingParams);
        Set<Parameter> all = Collections.newSetFromMap(new IdentityHashMap<>());
        List<Parameter> sp = new ArrayList<>();
        for (Parameter p : this.params) {
            if (!all.add(p)) {
                throw new IllegalArgumentException("parameter " + p + " is listed twice");
            }
            DataType dtype = DataTypes.of(p.data());
            if (!Tensors.isFloating(dtype)) {
                throw new IllegalArgumentException("parameter " + p + " has dtype " + dtype + "; expected a floating type");
            }
            if (p.kind() == Parameter.Kind.SEQUENCE_PARALLEL) {
                sp.add(p);
            }
        }
        this.sequenceParallel = Collections.unmodifiableList(sp);
        this.sharedEmbeddingSet = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Parameter p : sharedEmbedding) {
            if (!all.contains(p)) {
                throw new IllegalArgumentException("shared embedding parameter " + p + " is not among the parameters");
            }
            sharedEmbeddingSet.add(p);
        }
        this.buckets = GradientBucket.plan(this.params, groups, config, sharedEmbeddingSet::contains);
        this.shardsGradients = config.dataParallelShardingStrategy().shardsGradients();
        this.waitsForPreSums = new boolean[buckets.size()];
        for (GradientBucket bucket : buckets) {
            for (GradientBucket.Slot slot : bucket.slots) {
                bucketOf.put(slot.param(), bucket);
                boolean preSummed = slot.param().kind() == Parameter.Kind.SEQUENCE_PARALLEL
                        || sharedEmbeddingSet.contains(slot.param());
                waitsForPreSums[bucket.index] |= preSummed;
            }
        }
        this.ownsRoot = parent == null && this.params.isEmpty();
        NDManager base = parent != null ? parent
                : this.params.isEmpty() ? Mcore4j.newRootManager() : this.params.get(0).data().getManager();
        this.manager = ownsRoot ? base : base.newSubManager();
        this.manager.setName("ddp");
        this.fillKernel = this.params.isEmpty() ? null
                : Kernels.find(BucketFillKernel.class, this.params.get(0).data().getDevice()).orElse(null);
        if (LOG.isDebugEnabled()) {
            LOG.debug("rank {}: {} parameters in {} buckets: {}", groups.worldRank(), this.params.size(), buckets.size(), buckets);
        }
    }

    /**
     * Synchronises the accumulated gradients (see the class comment): per bucket, one cast-and-copy
     * of each gradient into the bucket's buffer and one collective. Every rank of each group
     * involved must call it.
     *
     * @throws IllegalStateException if called twice without {@link #zeroGrad()} in between
     */
    public void finishGradSync() {
        if (synced != null) {
            throw new IllegalStateException("gradients are already synchronised; call zeroGrad() before the next step");
        }
        NDManager owner = stepManager != null ? stepManager : manager.newSubManager();
        stepManager = null;
        InFlight[] started = inFlight != null ? inFlight : new InFlight[buckets.size()];
        NDArray[] passSums = shardSum;
        try (NoGrad off = NoGrad.enter()) {
            for (GradientBucket bucket : buckets) {
                addLastPass(bucket, owner);
            }
        } catch (RuntimeException e) {
            owner.close();
            throw e;
        }
        // decided from the reports alone, the same on every rank, since it decides whether a collective runs
        boolean[] everyPassReduced = new boolean[buckets.size()];
        for (int b = 0; passesReduced != null && b < buckets.size(); b++) {
            everyPassReduced[b] = passesReduced[b] == expectedPasses;
        }
        disarm();
        NDArray[] result = new NDArray[buckets.size()];
        try (NoGrad off = NoGrad.enter(); NDManager temp = owner.newSubManager()) {
            // the pre-sums live in temp until every bucket has copied them
            Map<Parameter, NDArray> summed = new IdentityHashMap<>();
            sumAcross(groups.tp(), sequenceParallel, summed, temp);
            sumAcross(groups.embedding(), sharedEmbedding, summed, temp);
            for (GradientBucket bucket : buckets) {
                InFlight f = started[bucket.index];
                if (f == null && inPlace(bucket)) {
                    continue; // its gradients stay where they are; syncedShard copies them on first use
                }
                NDArray passSum = passSums != null ? passSums[bucket.index] : null;
                if (f == null && everyPassReduced[bucket.index]) {
                    result[bucket.index] = passSum; // every pass was reduced during backward
                    continue;
                }
                if (f == null) {
                    f = launch(bucket, summed, owner);
                }
                NDArray reduced = complete(bucket, f, summed, owner);
                result[bucket.index] = passSum == null ? reduced : passSum.addi(reduced);
                if (passSum != null) {
                    reduced.close();
                }
            }
        } catch (RuntimeException e) {
            owner.close();
            throw e;
        }
        syncManager = owner;
        synced = result;
        syncCount++;
    }

    /**
     * Keeps the buffers the {@link #finishGradSync()} just made as the step's synchronised gradients for later steps:
     * called inside a CUDA graph's captured body right after {@link #finishGradSync()}, whose work (the overlapped
     * reductions started during the captured backward included) the graph repeats into the same memory in every
     * replay. {@link #zeroGrad()} and {@link #keepGradients()} then leave them alone; {@link #restorePinned()} hands
     * them out after a replay. Buffers pinned before (an earlier capture's) are released.
     *
     * @throws IllegalStateException before {@link #finishGradSync()}
     */
    public void pinSynced() {
        if (synced == null) {
            throw new IllegalStateException("no synchronised gradients to pin: call finishGradSync() first");
        }
        if (pinnedManager != null && pinnedManager != syncManager) {
            pinnedManager.close();
        }
        pinnedManager = syncManager;
        pinnedSynced = synced.clone();
        // what a reader adds to this step's buffers (an in-place bucket's flat copy) goes with the step
        syncManager = pinnedManager.newSubManager();
    }

    /**
     * Takes the pinned buffers ({@link #pinSynced()}) as this step's synchronised gradients, after a CUDA graph
     * replay remade them; the step armed for it saw no reports (a replay runs no Java) and is disarmed. Nothing to
     * do where this step's captured body ran (the capture, or a stand-in replay that runs the body again): its
     * {@link #finishGradSync()} synchronised the gradients already.
     *
     * @throws IllegalStateException if nothing is pinned
     */
    public void restorePinned() {
        if (pinnedManager == null) {
            throw new IllegalStateException("no pinned gradients: a CUDA graph's body must call finishGradSync() and"
                    + " pinSynced()");
        }
        if (synced != null) {
            return;
        }
        if (stepManager != null) {
            stepManager.close();
            stepManager = null;
        }
        disarm();
        synced = pinnedSynced.clone();
        syncManager = pinnedManager.newSubManager();
        syncCount++;
    }

    /**
     * Whether this object reduces gradients as the model reports them through {@link #gradientsReady}: with
     * {@link OptimizerConfig#overlapGradReduce()}, and with sharded gradients (ZeRO-2), which are reduced pass by
     * pass whether overlapped or not. A trainer registers it as the model's gradient listener exactly then; otherwise
     * {@link #expectBackwardPasses} arms nothing and reports are ignored.
     *
     * @return true if the reports drive the reductions
     */
    public boolean reducesReportedGradients() {
        return config.overlapGradReduce() || shardsGradients;
    }

    /**
     * Arms the overlap of gradient reduction with backward for the coming step (no-op unless
     * {@link #reducesReportedGradients()}): each bucket's reduction starts once every
     * parameter in it has been reported {@code passes} times through {@link #gradientsReady}. Pass
     * the number of backward passes each parameter takes part in this step: the number of
     * micro-batches. Call it before the step's first backward, on every rank of the data-parallel
     * group. {@link #finishGradSync()} ends the armed step.
     *
     * @param passes backward passes per parameter in this step, at least 1
     * @throws IllegalArgumentException if {@code passes < 1}
     * @throws IllegalStateException if the gradients of the previous step are still synchronised
     *         (call {@link #zeroGrad()} first)
     */
    public void expectBackwardPasses(int passes) {
        if (passes < 1) {
            throw new IllegalArgumentException("backward passes per step must be at least 1, got " + passes);
        }
        if (synced != null) {
            throw new IllegalStateException("gradients of the last step are still synchronised; call zeroGrad() first");
        }
        if (!reducesReportedGradients()) {
            return;
        }
        if (inFlight != null) {
            for (InFlight f : inFlight) {
                if (f != null) {
                    throw new IllegalStateException("a bucket reduction of this step has already started;"
                            + " call finishGradSync() before arming the next step");
                }
            }
        }
        expectedPasses = passes;
        reports.clear();
        incomplete = new int[buckets.size()];
        for (GradientBucket bucket : buckets) {
            incomplete[bucket.index] = bucket.slots.size();
        }
        inFlight = new InFlight[buckets.size()];
        if (shardsGradients) {
            passesReduced = new int[buckets.size()];
            reportedInPass = new int[buckets.size()];
            unreported = new boolean[buckets.size()];
            lastPass = new InFlight[buckets.size()];
            shardSum = new NDArray[buckets.size()];
        }
    }

    /**
     * Counts a report that {@code parameters}' gradients from one backward pass are complete, and
     * starts the reduction of every bucket that this completes (see {@link #expectBackwardPasses}).
     * Ignored when no step is armed; parameters this object does not hold are ignored.
     *
     * @throws IllegalStateException if a parameter is reported more often than the armed passes
     */
    @Override
    public void gradientsReady(List<Parameter> parameters) {
        if (expectedPasses == 0) {
            return;
        }
        reportCount++;
        for (Parameter p : parameters) {
            GradientBucket bucket = bucketOf.get(p);
            if (bucket == null) {
                continue;
            }
            int n = reports.merge(p, 1, Integer::sum);
            if (n > expectedPasses) {
                throw new IllegalStateException("parameter " + p + " was reported ready " + n + " times, but the step was"
                        + " armed for " + expectedPasses + " backward passes (expectBackwardPasses)");
            }
            if (reducesPerPass(bucket) && n == 2 && passesReduced[bucket.index] == 0) {
                // pass 1 never completed the bucket: a parameter of it is reported by no layer (the embedding's are
                // complete only when the pass's backward returns). Its gradients stay whole and accumulate;
                // finishGradSync reduces them, as it does every bucket with gradients no report covers. The reports
                // are the same on every rank, so every rank decides the same.
                unreported[bucket.index] = true;
                reportedInPass[bucket.index] = 0;
            }
            if (reducesPerPass(bucket)) {
                if (n != passesReduced[bucket.index] + 1) {
                    throw new IllegalStateException("parameter " + p + " was reported ready for backward pass " + n
                            + " while its bucket " + bucket.index + " waits for the other parameters of pass "
                            + (passesReduced[bucket.index] + 1) + " (a parameter is reported once per pass)");
                }
                if (++reportedInPass[bucket.index] == bucket.slots.size()) {
                    reducePass(bucket);
                }
                continue;
            }
            if (config.overlapGradReduce() && n == expectedPasses && --incomplete[bucket.index] == 0 && !waitsForPreSums[bucket.index]
                    && !inPlace(bucket)) {
                if (stepManager == null) {
                    stepManager = manager.newSubManager();
                }
                try (NoGrad off = NoGrad.enter()) {
                    inFlight[bucket.index] = launch(bucket, Map.of(), stepManager);
                }
            }
        }
    }

    private void disarm() {
        expectedPasses = 0;
        reports.clear();
        incomplete = null;
        inFlight = null;
        passesReduced = null;
        reportedInPass = null;
        unreported = null;
        lastPass = null;
        shardSum = null;
        passesInFlight.clear();
    }

    /** Whether the armed step reduces the bucket once per backward pass (sharded gradients, ZeRO-2). */
    private boolean reducesPerPass(GradientBucket bucket) {
        return passesReduced != null && !waitsForPreSums[bucket.index] && !unreported[bucket.index] && !inPlace(bucket);
    }

    /**
     * Reduces the pass that every parameter of {@code bucket} has just reported: waits for the
     * bucket's previous pass and adds it to the shard sum, starts this pass's reduction, and releases
     * the parameters' gradients (the copy into the bucket's buffer is queued before the release).
     */
    private void reducePass(GradientBucket bucket) {
        int b = bucket.index;
        reportedInPass[b] = 0;
        passesReduced[b]++;
        if (stepManager == null) {
            stepManager = manager.newSubManager();
        }
        try (NoGrad off = NoGrad.enter()) {
            addLastPass(bucket, stepManager);
            while (!passesInFlight.isEmpty() && passesInFlight.peek().report() <= reportCount - REPORTS_IN_FLIGHT) {
                addLastPass(buckets.get(passesInFlight.peek().bucket()), stepManager);
            }
            lastPass[b] = launch(bucket, Map.of(), stepManager);
            passesInFlight.add(new Started(b, reportCount));
            try (NDManager temp = stepManager.newSubManager()) {
                List<NDArray> grads = new ArrayList<>(bucket.slots.size());
                for (GradientBucket.Slot slot : bucket.slots) {
                    NDArray g = slot.param().gradient(temp);
                    if (g != null) {
                        grads.add(g);
                    }
                }
                TensorMemory.releaseStorage(grads);
            }
        }
        for (GradientBucket.Slot slot : bucket.slots) {
            slot.param().clearGradient();
        }
    }

    /** Waits for the bucket's last started pass, if any, and adds its shard to the bucket's shard sum. */
    private void addLastPass(GradientBucket bucket, NDManager owner) {
        int b = bucket.index;
        if (lastPass == null || lastPass[b] == null) {
            return;
        }
        InFlight f = lastPass[b];
        lastPass[b] = null;
        passesInFlight.removeIf(started -> started.bucket() == b);
        NDArray shard = complete(bucket, f, Map.of(), owner);
        if (shardSum[b] == null) {
            shardSum[b] = shard;
        } else {
            shardSum[b].addi(shard);
            shard.close();
        }
    }

    /**
     * Sets every parameter's {@code .grad} to none and releases the synchronised buffers: the
     * default {@code zeroGrad(true)}.
     */
    public void zeroGrad() {
        zeroGrad(true);
    }

    /**
     * Ends the step's gradients and releases the synchronised buffers.
     *
     * <p>{@code setToNone} (the default, PyTorch's and Megatron's {@code zero_grad(set_to_none=True)})
     * drops every {@code .grad} ({@link Parameter#clearGradient()}): nothing runs on the device, and
     * the next step's first backward makes each gradient as it is instead of adding it into zeros.
     * Otherwise every {@code .grad} is zeroed in place (one fill per parameter, and one add per
     * parameter in the next first backward). Both give bitwise the same gradients (a sum that
     * starts from zero adds nothing) and the same trained parameters; a parameter that gets no
     * gradient in a step reads as zeros either way (the buckets write zeros for it).
     *
     * @param setToNone whether to drop the gradients rather than zero them
     */
    public void zeroGrad(boolean setToNone) {
        releaseSynced();
        for (Parameter p : params) {
            if (setToNone) {
                p.clearGradient();
            } else {
                p.zeroGradient();
            }
        }
    }

    /**
     * Ends the step's gradients like {@link #zeroGrad()} but leaves every {@code .grad} as it is: for
     * steps whose next backward writes the gradients afresh instead of adding to them (a forward-backward
     * replayed from a CUDA graph, whose first micro-batch makes each {@code .grad}).
     */
    public void keepGradients() {
        releaseSynced();
    }

    /** @return whether {@link #finishGradSync()} ran since the last {@link #zeroGrad()} */
    public boolean isGradSynced() {
        return synced != null;
    }

    /** @return the parameters, in the order given */
    public List<Parameter> parameters() {
        return params;
    }

    /** @return the parameters tied across the first and last pipeline stage */
    public List<Parameter> sharedEmbeddingParameters() {
        return sharedEmbedding;
    }

    /** @return whether gradients are reduce-scattered for the distributed optimizer */
    public boolean usesDistributedOptimizer() {
        return config.useDistributedOptimizer();
    }

    /** @return the configuration */
    public OptimizerConfig config() {
        return config;
    }

    /** @return this rank's groups */
    public ProcessGroups groups() {
        return groups;
    }

    /** @return number of gradient buckets */
    public int bucketCount() {
        return buckets.size();
    }

    /** @return the bucket layouts, in index order */
    List<GradientBucket> buckets() {
        return buckets;
    }

    /**
     * This rank's synchronised gradient shard of a bucket (the whole bucket without the distributed
     * optimizer), 1-D, owned by this object until {@link #zeroGrad()}.
     *
     * @param bucket the bucket index
     * @return the flat shard
     * @throws IllegalStateException before {@link #finishGradSync()}
     */
    NDArray syncedShard(int bucket) {
        if (synced == null) {
            throw new IllegalStateException("gradients are not synchronised: call finishGradSync() after the last backward");
        }
        if (synced[bucket] == null) {
            // an in-place bucket's flat copy, made on first use: its .grads hold the synchronised values
            GradientBucket b = buckets.get(bucket);
            try (NoGrad off = NoGrad.enter()) {
                synced[bucket] = complete(b, launch(b, Map.of(), syncManager), Map.of(), syncManager);
            }
        }
        return synced[bucket];
    }

    /**
     * Whether a bucket's synchronised gradients are exactly its parameters' {@code .grad}s (a
     * parameter without one: zeros), so that a reader can take them from there instead of from
     * {@link #syncedShard}: nothing is reduced for it (its group and the data-parallel group have one
     * rank) and none of its parameters is pre-summed. {@link #finishGradSync()} makes no flat copy of
     * such a bucket; {@link #syncedShard} makes it on first use.
     *
     * @param bucket the bucket index
     * @return whether the bucket's gradients are synchronised in place
     * @throws IllegalStateException before {@link #finishGradSync()}
     */
    boolean gradientsInPlace(int bucket) {
        if (synced == null) {
            throw new IllegalStateException("gradients are not synchronised: call finishGradSync() after the last backward");
        }
        return inPlace(buckets.get(bucket));
    }

    private boolean inPlace(GradientBucket bucket) {
        return bucket.group.size() == 1 && groups.dpCp().size() == 1 && !waitsForPreSums[bucket.index];
    }

    /** @return how many times {@link #finishGradSync()} has completed: identifies the current synchronised gradients */
    long syncCount() {
        return syncCount;
    }

    /** @return the manager under which the synchronised buffers live */
    NDManager manager() {
        return manager;
    }

    /** Releases the synchronised buffers (parameters are not touched). */
    @Override
    public void close() {
        releaseSynced();
        manager.close();
    }

    private void releaseSynced() {
        if (stepManager != null) {
            // an armed step abandoned before finishGradSync: wait for what it started, then drop it
            for (InFlight f : inFlight) {
                if (f != null) {
                    f.pending().await();
                }
            }
            for (int b = 0; lastPass != null && b < lastPass.length; b++) {
                if (lastPass[b] != null) {
                    lastPass[b].pending().await();
                }
            }
            stepManager.close();
            stepManager = null;
        }
        disarm();
        if (syncManager != null) {
            syncManager.close();
            syncManager = null;
        }
        synced = null;
    }

    /**
     * Sums the gradients of {@code members} over {@code group} in one in-place all-reduce of a flat
     * buffer in {@code temp}, and records a view of each parameter's sum in {@code summed}.
     */
    private void sumAcross(Communicator group, List<Parameter> members, Map<Parameter, NDArray> summed, NDManager temp) {
        if (group.size() == 1 || members.isEmpty()) {
            return;
        }
        long total = 0;
        for (Parameter p : members) {
            total += p.data().getShape().size();
        }
        NDArray flat = DataTypes.empty(temp, new Shape(total), reductionDtype(members), temp.getDevice());
        long offset = 0;
        for (Parameter p : members) {
            long n = p.data().getShape().size();
            copyGradient(p, summed, flat, offset, temp);
            offset += n;
        }
        group.allReduceInPlace(flat, ReduceOp.SUM);
        offset = 0;
        for (Parameter p : members) {
            long n = p.data().getShape().size();
            summed.put(p, range(flat, offset, offset + n, temp));
            offset += n;
        }
    }

    private DataType reductionDtype(List<Parameter> members) {
        DataType first = DataTypes.of(members.get(0).data());
        if (config.gradReduceInFp32()) {
            return DataType.FLOAT32;
        }
        for (Parameter p : members) {
            if (DataTypes.of(p.data()) != first) {
                return DataType.FLOAT32;
            }
        }
        return first;
    }

    /**
     * Writes {@code p}'s gradient (its pre-sum if it has one, else its accumulated {@code .grad},
     * else zeros) into {@code flat} at {@code offset}, cast to {@code flat}'s dtype in the same copy.
     */
    private static void copyGradient(Parameter p, Map<Parameter, NDArray> summed, NDArray flat, long offset,
                                     NDManager temp) {
        long n = p.data().getShape().size();
        NDArray slice = range(flat, offset, offset + n, temp);
        NDArray g = summed.get(p);
        if (g == null) {
            g = p.gradient(temp);
        }
        if (g == null) {
            FlatTensors.fillZero(slice, temp);
        } else {
            Tensors.copyInto(slice, own(g.reshape(-1), temp));
        }
    }

    /**
     * Fills the bucket's slots with two kernels instead of one per parameter when every gradient must
     * be widened (float16 or bfloat16 gradients, a float32 buffer): the gradients are concatenated in
     * their own dtype (libtorch's batched copy), then cast into the buffer in one vectorised pass.
     * A per-parameter cast-and-copy runs libtorch's unvectorised casting kernel once per parameter:
     * 4.8 ms of kernels and ~300 launches per step for the 1.3B benchmark on one H200.
     *
     * @return false, having written nothing, if a slot has a pre-sum or no gradient, or needs no cast
     */
    private static boolean copyConcatenated(GradientBucket bucket, Map<Parameter, NDArray> summed, NDArray flat,
                                            NDManager temp) {
        // a .grad has its parameter's dtype (libtorch refuses any other), and a bucket's parameters share one: the
        // dtypes are known without asking each gradient (a bfloat16 tensor's dtype is a module call, per step here)
        if (bucket.slots.size() < 2 || bucket.paramDtype == bucket.gradDtype) {
            return false;
        }
        NDList grads = new NDList(bucket.slots.size());
        for (GradientBucket.Slot slot : bucket.slots) {
            NDArray g = summed.containsKey(slot.param()) ? null : slot.param().gradient(temp);
            if (g == null) {
                return false;
            }
            grads.add(own(g.reshape(-1), temp));
        }
        NDArray joined = own(NDArrays.concat(grads, 0), temp);
        Tensors.copyInto(range(flat, 0, bucket.numel, temp), joined);
        return true;
    }

    /**
     * Fills a bucket's flat buffer (its gradient dtype and padded length) with the gradients (pre-sums where
     * {@code summed} has them), scales it for the mean, and starts its collective; temporaries are released before
     * returning.
     */
    private InFlight launch(GradientBucket bucket, Map<Parameter, NDArray> summed, NDManager owner) {
        Communicator group = bucket.group;
        boolean scatter = config.useDistributedOptimizer() && group.size() > 1;
        // the loss is a mean over the global batch, which is split over the DP x CP ranks: every
        // gradient, an expert's too, is divided by that count (before the collective, unless it averages);
        // expert buckets are only summed over the smaller expert-DP group because the other ranks' tokens
        // already reached the expert
        int dataParallel = groups.dpCp().size();
        boolean average = config.averageInCollective();
        int divisor = dataParallel > 1 && (group.size() == 1 || !average) ? dataParallel : 1;
        // the buffer is the result unless a reduce-scatter leaves only a shard of it
        NDManager buffers = scatter ? owner.newSubManager() : owner;
        NDArray flat = DataTypes.empty(buffers, new Shape(bucket.paddedNumel), bucket.gradDtype, buffers.getDevice());
        boolean divided = false;
        try (NDManager temp = owner.newSubManager()) {
            // one pass where a kernel can: the cast and the division in the copy (float32 reciprocal, as libtorch
            // divides by a host scalar)
            divided = fillInOnePass(bucket, summed, flat, 1f / divisor, temp);
            if (!divided && !copyConcatenated(bucket, summed, flat, temp)) {
                for (GradientBucket.Slot slot : bucket.slots) {
                    copyGradient(slot.param(), summed, flat, slot.offset(), temp);
                }
            }
            if (!divided && bucket.padding() > 0) {
                FlatTensors.fillZero(range(flat, bucket.numel, bucket.paddedNumel, temp), temp);
            }
        }
        // divisors are host scalars (Tensors.hostScalar): a Java number is a synchronising host copy on a GPU,
        // mid-backward here, and a device scalar a broadcast operand, which libtorch divides by unvectorised
        if (divisor > 1 && !divided) {
            flat.divi(Tensors.hostScalar(divisor, flat, buffers));
        }
        if (group.size() == 1) {
            return new InFlight(buffers, flat, false, () -> flat);
        }
        ReduceOp op = average ? ReduceOp.AVG : ReduceOp.SUM;
        PendingCollective pending = scatter ? group.startReduceScatter(flat, op, owner) : group.startAllReduceInPlace(flat, op);
        return new InFlight(buffers, flat, scatter, pending);
    }

    /**
     * Fills the whole buffer (padding zeroed) with the device's {@link BucketFillKernel}, each gradient (or pre-sum)
     * read where it lies and multiplied by {@code scale} in the cast.
     *
     * @return false, having written nothing, if there is no kernel or a source is not contiguous
     */
    private boolean fillInOnePass(GradientBucket bucket, Map<Parameter, NDArray> summed, NDArray flat, float scale,
                                  NDManager temp) {
        if (fillKernel == null) {
            return false;
        }
        List<BucketFillKernel.Segment> segments = new ArrayList<>(bucket.slots.size() + 1);
        for (GradientBucket.Slot slot : bucket.slots) {
            NDArray pre = summed.get(slot.param());
            NDArray g = pre != null ? pre : slot.param().gradient(temp);
            if (g != null && !TensorMemory.isContiguous(g)) {
                return false;
            }
            // a .grad has its parameter's dtype; a pre-sum the dtype of its reduction
            DataType dtype = pre != null ? DataTypes.of(pre) : bucket.paramDtype;
            segments.add(new BucketFillKernel.Segment(g, dtype, slot.offset(), slot.numel()));
        }
        if (bucket.padding() > 0) {
            segments.add(new BucketFillKernel.Segment(null, bucket.gradDtype, bucket.numel, bucket.padding()));
        }
        fillKernel.fill(flat, bucket.gradDtype, segments, scale);
        return true;
    }

    /** Waits for a started bucket, finishes the mean, and writes the result back into {@code .grad} where needed. */
    private NDArray complete(GradientBucket bucket, InFlight f, Map<Parameter, NDArray> summed, NDManager parent) {
        Communicator group = bucket.group;
        int dataParallel = groups.dpCp().size();
        NDArray result = f.pending().await();
        if (f.scatter()) {
            f.buffers().close(); // the full buffer; the stream now waits for the collective that read it
        }
        if (group.size() > 1 && config.averageInCollective() && group.size() != dataParallel) {
            result.muli(Tensors.hostScalar((double) group.size() / dataParallel, result, parent));
        }
        if (!config.useDistributedOptimizer()) {
            // with nothing to reduce the buffer holds each .grad's own values, except pre-sums
            boolean identity = group.size() == 1 && dataParallel == 1;
            try (NDManager temp = parent.newSubManager()) {
                for (GradientBucket.Slot slot : bucket.slots) {
                    if (identity && !summed.containsKey(slot.param())) {
                        continue;
                    }
                    NDArray data = slot.param().data();
                    NDArray view = own(range(result, slot.offset(), slot.offset() + slot.numel(), temp)
                            .reshape(data.getShape()), temp);
                    NDArray grad = slot.param().gradient(temp);
                    if (grad != null) {
                        Tensors.copyInto(grad, view);
                    } else {
                        // no gradient here (none reached this parameter on this rank), but others
                        // sent theirs: give it one, a copy, so that the buffer stays the optimizer's
                        Tensors.accumulateGradient(data, own(DataTypes.toType(view, DataTypes.of(data), true), temp));
                    }
                }
            }
        }
        return result;
    }
}
