package io.mcore4j.inference.engine;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import io.mcore4j.core.GraphOptimization;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.kernel.GraphCapture;
import io.mcore4j.core.kernel.HostReadback;
import io.mcore4j.core.kernel.Kernels;
import io.mcore4j.inference.PagedKvCache;
import io.mcore4j.inference.TokenSampler;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.parallel.Communicator;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A {@link GenerationEngine} over a {@link PagedKvCache}: continuous batching as vLLM does it. The engine's thread
 * loops: it ends cancelled requests (their blocks go back at once), admits waiting requests while a running slot
 * ({@link EngineConfig#maxNumSeqs()}) and the blocks of their whole budget (prompt plus max tokens, reserved at
 * admission, so a running request never waits for memory) are free, prefills new prompts in chunks within the step's
 * token budget ({@link EngineConfig#maxNumBatchedTokens()}), the step's chunks in one eager pass (left-padded to the
 * longest), and runs one decode step for
 * every request whose prompt is in: one token each, padded to the smallest batch-size bucket (1, 2, 4, ... up to
 * max num seqs), a {@link DecodeStep} that is replayed from a CUDA graph where the device can. A request therefore
 * joins the running batch between two steps and leaves it when it stops, reaches its max tokens, or is cancelled.
 *
 * <p><b>Picking.</b> A greedy request without penalties takes the argmax computed on the device, so only the picked
 * ids cross to the host; others (sampling, penalties, log-probabilities) read their row of logits and pick with their
 * own {@link TokenSampler}, seeded per request, so a request's tokens do not depend on the batch it ran in (up to
 * floating-point summation order, which differs between batch sizes).
 *
 * <p><b>Steps queued ahead.</b> While the running requests stay the same and all pick on the device, the next decode
 * step is queued before the host reads this one's picks: each {@link DecodeStep} leaves its successor's inputs on the
 * device, and its picks reach the host through a {@link HostReadback} buffer (page-locked memory on a GPU), so the
 * host's delivery and callbacks overlap the device's next step. Any change (a request admitted, ended or cancelled,
 * or one that samples on the host) lands the step in flight first.
 *
 * <p><b>Tensor parallelism.</b> Every rank of the model's tensor-parallel group {@link #start starts} an engine on
 * its own chunk of the model. Rank 0 is the leader: it takes requests, schedules, and broadcasts each pass's plan
 * ({@link StepPlan}) over the group; the other ranks are followers that run the plans they receive until the leader
 * closes (their {@link #submit} throws; their {@link #close} waits for the leader's). The model must be one pipeline
 * stage. Decode steps are captured into CUDA graphs at any tensor-parallel size, their collectives inside: every rank
 * captures a bucket at the same step and replays it at the same steps (see {@link DecodeStep}); each plan's broadcast
 * stays outside the graphs, on the host before the replay.
 *
 * <p>Owns its cache, decode steps and graphs (a sub-manager of the model's parameter manager), freed when the engine's
 * thread ends.
 */
public final class ContinuousBatchingEngine implements GenerationEngine {
    private static final Logger LOG = LoggerFactory.getLogger(ContinuousBatchingEngine.class);

    private final EngineConfig config;
    private final int maxModelLength;
    private final int vocabulary;
    private final Communicator tp;
    private final boolean leader;
    private final NDManager manager;
    private final PagedKvCache cache;
    private final int width;
    private final Map<Integer, DecodeStep> steps = new TreeMap<>();
    private final ArrayBlockingQueue<Request> waiting;
    /** Requests holding blocks, in admission order; the engine's thread only. */
    private final List<Request> running = new ArrayList<>();
    private final AtomicInteger pending = new AtomicInteger();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition work = lock.newCondition();
    private volatile boolean closing;
    private final Thread thread;
    /** Host buffers the decode steps' picks are copied into, used in turn (two steps may be in flight). */
    private final HostReadback.Buffer[] readbacks;
    private int nextReadback;
    /** The decode step queued last whose picks are not yet delivered, or null; the leader's thread only. */
    private InFlight inFlight;
    /** Prefill passes run, and decode steps queued from their last step's device-side inputs (the engine's thread). */
    private volatile long prefillPasses;
    private volatile long advancedSteps;
    /** One request's row of logits on the host, reused by {@link #deliver} (the engine's thread only). */
    private final float[] hostRow;

    private ContinuousBatchingEngine(GptModel model, EngineConfig config) {
        this.config = config;
        var c = model.context().config();
        this.maxModelLength = config.maxModelLength() > 0 ? config.maxModelLength() : c.maxSequenceLength();
        this.vocabulary = config.vocabularySize() > 0 ? config.vocabularySize() : c.vocabSize();
        this.hostRow = new float[vocabulary];
        if (vocabulary > c.vocabSize()) {
            throw new IllegalArgumentException("vocabulary size " + vocabulary + " exceeds the model's " + c.vocabSize());
        }
        if (config.terminationId() >= vocabulary) {
            throw new IllegalArgumentException("termination id " + config.terminationId() + " lies outside the vocabulary [0, "
                    + vocabulary + ")");
        }
        this.tp = model.context().groups().tp();
        this.leader = tp.rank() == 0;
        this.width = (maxModelLength + config.blockSize() - 1) / config.blockSize();
        int numBlocks = config.numBlocks() > 0 ? config.numBlocks() : config.maxNumSeqs() * width + 1;
        this.manager = model.context().parameters().newSubManager();
        try {
            this.cache = new PagedKvCache(model, manager, config.blockSize(), numBlocks, maxModelLength);
            GraphCapture capture = graphCapture(config, tp, manager);
            for (int bucket = 1; ; bucket *= 2) {
                int b = Math.min(bucket, config.maxNumSeqs());
                steps.put(b, new DecodeStep(cache, b, width, vocabulary, capture, tp, manager));
                if (b == config.maxNumSeqs()) {
                    break;
                }
            }
        } catch (RuntimeException e) {
            manager.close();
            throw e;
        }
        this.readbacks = new HostReadback.Buffer[2];
        for (int i = 0; i < readbacks.length; i++) {
            readbacks[i] = HostReadback.open(manager.getDevice(), config.maxNumSeqs());
        }
        this.waiting = new ArrayBlockingQueue<>(config.maxWaitingRequests());
        this.thread = new Thread(leader ? this::lead : this::follow, "mcore4j-engine-tp" + tp.rank());
        this.thread.setDaemon(true);
    }

    /**
     * The one choice between graphs and eager decode steps: the device's {@link GraphCapture} when the config asks for
     * graphs and every rank of the group has one (asked over the group, so that all capture or none do), else null.
     */
    private static GraphCapture graphCapture(EngineConfig config, Communicator tp, NDManager manager) {
        if (!config.cudaGraphs()) {
            return null;
        }
        GraphCapture capture = Kernels.find(GraphCapture.class, manager.getDevice()).orElse(null);
        if (!DecodeStep.onEveryRank(capture != null, tp, manager)) {
            if (capture != null) {
                LOG.warn("decode steps run eagerly: another of the {} tensor-parallel ranks has no CUDA graph support",
                        tp.size());
            }
            return null;
        }
        return capture;
    }

    /**
     * Starts an engine on this rank's model; every rank of the tensor-parallel group calls it with the same config (a
     * collective over the group, which asks whether every rank can capture CUDA graphs).
     *
     * @param model this rank's model, one pipeline stage (see {@link PagedKvCache} for what it must be)
     * @param config the engine's sizes
     * @return the running engine: the leader on tensor-parallel rank 0, a follower elsewhere
     * @throws IllegalArgumentException naming what the model or the config does not allow
     */
    public static ContinuousBatchingEngine start(GptModel model, EngineConfig config) {
        ContinuousBatchingEngine engine = new ContinuousBatchingEngine(model, config);
        engine.thread.start();
        return engine;
    }

    /** @return the blocks' allocator (its free count is back to its capacity once no request holds blocks) */
    public io.mcore4j.inference.BlockAllocator allocator() {
        return cache.allocator();
    }

    /** @return whether this engine takes requests (tensor-parallel rank 0) */
    public boolean isLeader() {
        return leader;
    }

    @Override
    public RequestHandle submit(EngineRequest request, TokenStream stream) {
        if (!leader) {
            throw new IllegalStateException("requests go to tensor-parallel rank 0's engine; this is rank " + tp.rank());
        }
        request.validate(vocabulary, maxModelLength);
        int[] prompt = request.promptTokens();
        int total = prompt.length + request.maxTokens();
        int blocks = (total + config.blockSize() - 1) / config.blockSize();
        if (blocks > cache.allocator().capacity()) {
            throw new IllegalArgumentException("a request of " + total + " positions needs " + blocks
                    + " blocks, more than the cache's " + cache.allocator().capacity());
        }
        Request r = new Request(request, prompt, stream, blocks);
        lock.lock();
        try {
            if (closing) {
                throw new IllegalStateException("the engine is closed");
            }
            if (!waiting.offer(r)) {
                throw new EngineFullException("the engine's queue of " + config.maxWaitingRequests()
                        + " waiting requests is full");
            }
            pending.incrementAndGet();
            work.signal();
        } finally {
            lock.unlock();
        }
        return r;
    }

    @Override
    public int maxSequenceLength() {
        return maxModelLength;
    }

    @Override
    public int vocabularySize() {
        return vocabulary;
    }

    @Override
    public int pendingRequests() {
        return pending.get();
    }

    /**
     * Ends every request with CANCELLED and stops the engine's thread (on the leader); on a follower, waits until the
     * leader's close has stopped it.
     */
    @Override
    public void close() {
        lock.lock();
        try {
            closing = true;
            work.signal();
        } finally {
            lock.unlock();
        }
        if (Thread.currentThread() != thread) {
            try {
                thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** The leader's loop: schedule, broadcast, run, deliver; on the way out cancel everything and stop the followers. */
    private void lead() {
        try (GraphOptimization ignored = GraphOptimization.set(true)) {
            while (!closing) {
                dropCancelled();
                admit();
                if (running.isEmpty()) {
                    awaitWork();
                } else {
                    step();
                }
            }
        } catch (RuntimeException | Error e) {
            LOG.error("the engine's thread failed; every request ends with the error", e);
            for (Request r : new ArrayList<>(running)) {
                fail(r, e);
            }
        } finally {
            lock.lock();
            try {
                closing = true;
            } finally {
                lock.unlock();
            }
            if (inFlight != null) {
                inFlight.picks.await(); // the device is done with the step before its memory goes
                inFlight = null;
            }
            for (Request r : new ArrayList<>(running)) {
                finish(r, FinishReason.CANCELLED);
            }
            for (Request r; (r = waiting.poll()) != null; ) {
                finish(r, FinishReason.CANCELLED);
            }
            try {
                StepPlan.broadcast(StepPlan.stop(), tp, manager);
            } finally {
                release();
            }
        }
    }

    /** A follower's loop: run the leader's plans until it stops. */
    private void follow() {
        try (GraphOptimization ignored = GraphOptimization.set(true)) {
            for (StepPlan plan; (plan = StepPlan.broadcast(null, tp, manager)).kind() != StepPlan.STOP; ) {
                run(plan, false);
            }
        } catch (RuntimeException | Error e) {
            LOG.error("tensor-parallel rank {}'s engine failed", tp.rank(), e);
        } finally {
            release();
        }
    }

    private void release() {
        for (HostReadback.Buffer b : readbacks) {
            b.close();
        }
        for (DecodeStep s : steps.values()) {
            s.close();
        }
        manager.close();
    }

    private void awaitWork() {
        lock.lock();
        try {
            if (!closing && waiting.isEmpty()) {
                work.await(100, TimeUnit.MILLISECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            closing = true;
        } finally {
            lock.unlock();
        }
    }

    private void dropCancelled() {
        for (Request r : new ArrayList<>(running)) {
            if (r.cancelled) {
                finish(r, FinishReason.CANCELLED);
            }
        }
        for (Iterator<Request> it = waiting.iterator(); it.hasNext(); ) {
            Request r = it.next();
            if (r.cancelled) {
                it.remove();
                finish(r, FinishReason.CANCELLED);
            }
        }
    }

    private void admit() {
        while (running.size() < config.maxNumSeqs()) {
            Request r = waiting.peek();
            if (r == null) {
                return;
            }
            int[] blocks = cache.allocator().allocate(r.blocksNeeded);
            if (blocks == null) {
                return; // the oldest waits for blocks: first come, first served
            }
            waiting.poll();
            r.blocks = blocks;
            running.add(r);
        }
    }

    /** One engine step: a pass over prompt chunks within the token budget, then one decode step for every request past its prompt. */
    private void step() {
        if (inFlight != null && continues(inFlight)) {
            // the same sequences, all picked on the device: queue their next step before reading this one's picks
            InFlight previous = inFlight;
            DecodeStep step = run(StepPlan.broadcast(StepPlan.advance(previous.step.bucket()), tp, manager));
            advancedSteps++;
            inFlight = new InFlight(step, previous.batch, readPicks(step));
            land(previous);
            return;
        }
        if (inFlight != null) {
            InFlight previous = inFlight;
            inFlight = null;
            land(previous);
        }
        List<Request> decoding = new ArrayList<>();
        List<Request> prompting = new ArrayList<>();
        for (Request r : running) {
            (r.prefilled == r.prompt.length ? decoding : prompting).add(r);
        }
        if (!prompting.isEmpty()) {
            prefill(prompting, Math.max(1, config.maxNumBatchedTokens() - decoding.size()));
        }
        int largest = config.maxNumSeqs();
        for (int from = 0; from < decoding.size(); from += largest) {
            decode(decoding.subList(from, Math.min(decoding.size(), from + largest)));
        }
    }

    /**
     * One eager pass over the next prompt chunk of as many of {@code prompting} (in admission order) as fit the
     * budget, counted in padded tokens: the pass is [longest chunk, requests], each chunk left-padded to the longest
     * so that every row's last token is its chunk's last (the one whose logits pick a completed prompt's first
     * token). The first request takes up to the whole budget; each next one joins while the padded pass stays within
     * it. Padding rows (token 0) sit at the first position of an extra table column of null blocks, so their keys and
     * values go to the null block, and no real query sees them (they lie past every real position).
     */
    private void prefill(List<Request> prompting, int budget) {
        List<Request> pass = new ArrayList<>();
        List<Integer> chunks = new ArrayList<>();
        int longest = 0;
        int width = 0;
        for (Request r : prompting) {
            int k = pass.size() + 1;
            int n = Math.min(r.prompt.length - r.prefilled, budget / k);
            if (n < 1 || longest * k > budget) {
                break;
            }
            pass.add(r);
            chunks.add(n);
            longest = Math.max(longest, n);
            width = Math.max(width, r.blocks.length);
        }
        int b = pass.size();
        if (chunks.stream().mapToInt(Integer::intValue).sum() < longest * b) {
            width++; // the null column the padding rows write to
        }
        long padPosition = (long) (width - 1) * config.blockSize();
        long[] tokens = new long[longest * b];
        long[] positions = new long[b * longest];
        long[] tables = new long[b * width];
        boolean hostLogits = false;
        for (int j = 0; j < b; j++) {
            Request r = pass.get(j);
            int n = chunks.get(j);
            int pad = longest - n;
            for (int i = 0; i < longest; i++) {
                boolean real = i >= pad;
                tokens[i * b + j] = real ? r.prompt[r.prefilled + i - pad] : 0;
                positions[j * longest + i] = real ? r.prefilled + i - pad : padPosition;
            }
            for (int k = 0; k < r.blocks.length; k++) {
                tables[j * width + k] = r.blocks[k];
            }
            hostLogits |= r.hostLogits && r.prefilled + n == r.prompt.length;
        }
        StepPlan plan = new StepPlan(StepPlan.PASS, b, longest, width, tokens, positions, tables);
        prefillPasses++;
        try {
            Picks picks = run(StepPlan.broadcast(plan, tp, manager), hostLogits);
            for (int j = 0; j < b; j++) {
                Request r = pass.get(j);
                r.prefilled += chunks.get(j);
                if (r.prefilled == r.prompt.length) {
                    deliver(r, picks, j);
                }
            }
        } catch (RuntimeException e) {
            for (Request r : pass) {
                fail(r, e);
            }
        }
    }

    /** @return the prefill passes this engine has run (each over one or more requests' chunks) */
    long prefillPasses() {
        return prefillPasses;
    }

    /** @return the decode steps queued before the host had read their previous step's picks */
    long advancedSteps() {
        return advancedSteps;
    }

    private void decode(List<Request> batch) {
        int bucket = bucketFor(batch.size());
        long[] tokens = new long[bucket];
        long[] positions = new long[bucket];
        long[] tables = new long[bucket * width];
        boolean hostLogits = false;
        for (int i = 0; i < batch.size(); i++) {
            Request r = batch.get(i);
            tokens[i] = r.lastToken;
            positions[i] = r.prompt.length + r.generated - 1;
            for (int k = 0; k < r.blocks.length; k++) {
                tables[i * width + k] = r.blocks[k];
            }
            hostLogits |= r.hostLogits;
        }
        StepPlan plan = new StepPlan(StepPlan.DECODE, bucket, 1, width, tokens, positions, tables);
        try {
            if (!hostLogits && batch.size() == running.size()) {
                // every running sequence, each picked on the device: leave the step in flight (see continues)
                DecodeStep step = run(StepPlan.broadcast(plan, tp, manager));
                inFlight = new InFlight(step, List.copyOf(batch), readPicks(step));
                return;
            }
            Picks picks = run(StepPlan.broadcast(plan, tp, manager), hostLogits);
            for (int i = 0; i < batch.size(); i++) {
                deliver(batch.get(i), picks, i);
            }
        } catch (RuntimeException e) {
            for (Request r : batch) {
                fail(r, e);
            }
        }
    }

    /**
     * A decode step queued on the device whose picks the host has not delivered: the step, the requests of its rows,
     * and the host buffer its picks are being copied into.
     */
    private record InFlight(DecodeStep step, List<Request> batch, HostReadback.Buffer picks) {}

    /**
     * Whether the next step may be queued from the in-flight one's device-side inputs: the running requests are
     * exactly its rows, in order (none admitted, none ended since), so each row's next token is its pick and its next
     * position one on, and none reaches its max tokens with the in-flight pick (that one's end is known: the step
     * lands first rather than running a step nobody reads). A row whose in-flight pick ends it otherwise (a stop or
     * termination id) runs one step more, whose pick is dropped: its position is still inside the blocks reserved
     * for it (prompt plus max tokens), and blocks it frees are reused only by work queued after that step.
     */
    private boolean continues(InFlight f) {
        if (!running.equals(f.batch)) {
            return false;
        }
        for (Request r : f.batch) {
            if (r.generated + 1 >= r.request.maxTokens()) {
                return false;
            }
        }
        return true;
    }

    /** Queues the copy of {@code step}'s picks into the next host buffer; the leader reads it in {@link #land}. */
    private HostReadback.Buffer readPicks(DecodeStep step) {
        HostReadback.Buffer b = readbacks[nextReadback];
        nextReadback = (nextReadback + 1) % readbacks.length;
        b.copyFrom(step.picked());
        return b;
    }

    /** Waits for an in-flight step's picks and delivers them to its rows still running. */
    private void land(InFlight f) {
        Picks picks = new Picks(f.picks.await(), null);
        for (int i = 0; i < f.batch.size(); i++) {
            Request r = f.batch.get(i);
            if (!r.done) {
                deliver(r, picks, i);
            }
        }
    }

    private int bucketFor(int n) {
        for (int b : steps.keySet()) {
            if (b >= n) {
                return b;
            }
        }
        throw new IllegalStateException("no decode bucket holds " + n + " sequences");
    }

    /** What a pass picked, read on the leader: greedy ids per row, and the rows' float32 logits when asked. */
    private record Picks(long[] ids, float[] logits) {}

    /**
     * Runs a plan on this rank (a collective over the tensor-parallel group); on the leader reads the picks, and the
     * logits when {@code readLogits}.
     */
    private Picks run(StepPlan plan, boolean readLogits) {
        if (plan.kind() == StepPlan.DECODE || plan.kind() == StepPlan.ADVANCE) {
            DecodeStep step = run(plan);
            return leader ? read(step.picked(), step.logits(), readLogits) : null;
        }
        try (AutogradScope scope = AutogradScope.openNoGrad(manager)) {
            NDManager m = scope.manager();
            NDArray all = cache.forward(scope, m.create(plan.tokens(), new ai.djl.ndarray.types.Shape(plan.s(), plan.b())),
                    m.create(plan.positions(), new ai.djl.ndarray.types.Shape(plan.b(), plan.s())),
                    m.create(plan.tables(), new ai.djl.ndarray.types.Shape(plan.b(), plan.width())), true);
            NDArray logits = all.getShape().get(1) == vocabulary ? all : all.get(":, :{}", vocabulary);
            return leader ? read(logits.argMax(1), logits, readLogits) : null;
        }
    }

    /** Queues a decode plan's step (from the plan's inputs, or advanced from the step's last) and returns the step. */
    private DecodeStep run(StepPlan plan) {
        DecodeStep step = steps.get(plan.b());
        if (plan.kind() == StepPlan.ADVANCE) {
            step.runAdvanced();
        } else {
            step.run(plan.tokens(), plan.positions(), plan.tables());
        }
        return step;
    }

    private static Picks read(NDArray picked, NDArray logits, boolean readLogits) {
        return new Picks(picked.toLongArray(), readLogits ? logits.toType(DataType.FLOAT32, false).toFloatArray() : null);
    }

    /** Picks row {@code row}'s token for {@code r} and hands it on, or ends the request. */
    private void deliver(Request r, Picks picks, int row) {
        int token;
        float logprob = Float.NaN;
        if (r.hostLogits) {
            float[] logits = hostRow; // the sampler penalises it in place: a fresh copy of the row each time
            System.arraycopy(picks.logits(), row * vocabulary, logits, 0, vocabulary);
            token = r.sampler.next(logits, vocabulary);
            if (r.request.logprobs()) {
                logprob = r.sampler.logprob(logits, vocabulary, token);
            }
        } else {
            token = (int) picks.ids()[row];
        }
        if (token == config.terminationId() || r.stops(token)) {
            finish(r, FinishReason.STOP);
            return;
        }
        r.generated++;
        r.lastToken = token;
        float p = logprob;
        if (!callback(r, () -> r.stream.onToken(token, p))) {
            finish(r, FinishReason.CANCELLED);
        } else if (r.generated == r.request.maxTokens()) {
            finish(r, FinishReason.LENGTH);
        }
    }

    private void finish(Request r, FinishReason reason) {
        if (end(r)) {
            callback(r, () -> r.stream.onFinish(reason, r.prompt.length, r.generated));
        }
    }

    private void fail(Request r, Throwable error) {
        if (end(r)) {
            callback(r, () -> r.stream.onError(error));
        }
    }

    /** Takes the request out and frees its blocks; false if it had already ended. */
    private boolean end(Request r) {
        if (r.done) {
            return false;
        }
        r.done = true;
        running.remove(r);
        if (r.blocks != null) {
            cache.allocator().free(r.blocks);
            r.blocks = null;
        }
        pending.decrementAndGet();
        return true;
    }

    /** Runs a stream callback; one that throws is logged and its request cancelled (false). */
    private static boolean callback(Request r, Runnable call) {
        try {
            call.run();
            return true;
        } catch (RuntimeException e) {
            LOG.warn("a request's stream threw; the request is cancelled", e);
            r.cancelled = true;
            return false;
        }
    }

    private final class Request implements RequestHandle {
        final EngineRequest request;
        final int[] prompt;
        final TokenStream stream;
        final int blocksNeeded;
        final int[] stopIds;
        final boolean hostLogits;
        final TokenSampler sampler;
        volatile boolean cancelled;
        boolean done;
        int[] blocks;
        int prefilled;
        int generated;
        int lastToken;

        Request(EngineRequest request, int[] prompt, TokenStream stream, int blocksNeeded) {
            this.request = request;
            this.prompt = prompt;
            this.stream = stream;
            this.blocksNeeded = blocksNeeded;
            this.stopIds = request.stopTokenIds();
            Arrays.sort(stopIds);
            this.hostLogits = !request.sampling().isPlainGreedy() || request.logprobs();
            this.sampler = new TokenSampler(request.sampling(), prompt);
        }

        boolean stops(int token) {
            return Arrays.binarySearch(stopIds, token) >= 0;
        }

        @Override
        public void cancel() {
            cancelled = true;
            lock.lock();
            try {
                work.signal();
            } finally {
                lock.unlock();
            }
        }
    }
}
