package io.mcore4j.parallel.nccl;

import static org.bytedeco.cuda.global.cudart.cudaDeviceGetStreamPriorityRange;
import static org.bytedeco.cuda.global.cudart.cudaErrorNotReady;
import static org.bytedeco.cuda.global.cudart.cudaEventCreateWithFlags;
import static org.bytedeco.cuda.global.cudart.cudaEventDestroy;
import static org.bytedeco.cuda.global.cudart.cudaEventDisableTiming;
import static org.bytedeco.cuda.global.cudart.cudaEventQuery;
import static org.bytedeco.cuda.global.cudart.cudaEventRecord;
import static org.bytedeco.cuda.global.cudart.cudaGetDeviceCount;
import static org.bytedeco.cuda.global.cudart.cudaGetErrorString;
import static org.bytedeco.cuda.global.cudart.cudaSetDevice;
import static org.bytedeco.cuda.global.cudart.cudaStreamCreateWithPriority;
import static org.bytedeco.cuda.global.cudart.cudaStreamCaptureStatusNone;
import static org.bytedeco.cuda.global.cudart.cudaStreamDestroy;
import static org.bytedeco.cuda.global.cudart.cudaStreamIsCapturing;
import static org.bytedeco.cuda.global.cudart.cudaStreamNonBlocking;
import static org.bytedeco.cuda.global.cudart.cudaStreamWaitEvent;
import static org.bytedeco.cuda.global.cudart.cudaSuccess;
import static org.bytedeco.cuda.global.nccl.ncclCommAbort;
import static org.bytedeco.cuda.global.nccl.ncclCommDestroy;
import static org.bytedeco.cuda.global.nccl.ncclCommGetAsyncError;
import static org.bytedeco.cuda.global.nccl.ncclCommInitRank;
import static org.bytedeco.cuda.global.nccl.ncclGetErrorString;
import static org.bytedeco.cuda.global.nccl.ncclGetLastError;
import static org.bytedeco.cuda.global.nccl.ncclGetUniqueId;
import static org.bytedeco.cuda.global.nccl.ncclGetVersion;
import static org.bytedeco.cuda.global.nccl.ncclGroupEnd;
import static org.bytedeco.cuda.global.nccl.ncclGroupStart;
import static org.bytedeco.cuda.global.nccl.ncclInProgress;
import static org.bytedeco.cuda.global.nccl.ncclSuccess;

import io.mcore4j.cuda.CurrentStream;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;

import org.bytedeco.cuda.cudart.CUevent_st;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.nccl.ncclComm;
import org.bytedeco.cuda.nccl.ncclUniqueId;
import org.bytedeco.javacpp.BytePointer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One NCCL communicator ({@code ncclComm_t}) of one group, the CUDA events that track its work, and
 * the failure handling around both. Everything here calls CUDA or NCCL; the class is only loaded
 * when an {@link NcclBackend} is created.
 *
 * <p><b>Streams.</b> Every call is enqueued on the legacy default stream ({@code null}), the stream
 * DJL's libtorch ops run on (while the thread captures a CUDA graph, on the capture's stream instead,
 * {@link CurrentStream}, where nothing is handed to the watchdog and nothing may wait on the host): an NCCL call runs after the DJL ops enqueued before it and before
 * those enqueued after it, so inputs are ready and results are visible without extra
 * synchronisation. Collectives started to overlap later work run on a second, non-blocking,
 * highest-priority stream of this communicator ({@link #sideStream}), after an event on the default
 * stream; the default stream waits for each at {@link #joinSideStream}, and for all of them before this
 * communicator's next default-stream call (NCCL needs one order of calls per communicator), never before
 * another side-stream call (the side stream runs its calls in order).
 *
 * <p><b>Completion.</b> After enqueuing, a caller either returns at once and leaves the work to the
 * {@link NcclWatchdog} ({@link #enqueued}: an event is recorded behind the work and queued here), or
 * waits on the host ({@link #await}). The watchdog thread polls the oldest queued event of every
 * communicator and {@code ncclCommGetAsyncError}.
 *
 * <p><b>Failure.</b> On an NCCL error, a CUDA error or when work is not done {@code timeout} after
 * it was enqueued, whichever thread notices aborts the communicator ({@code ncclCommAbort}, which
 * also stops its kernels, so a stream stalled behind them moves on) and records why. Every later
 * call on the communicator then throws a {@link CommunicationException} naming the group and the
 * operation that failed. A timeout cannot name the missing rank (NCCL does not know it): the message
 * names the group's ranks. NCCL calls are made under a lock that the abort takes too (for at most
 * a second: a call stuck inside NCCL is then aborted under it, which is what ncclCommAbort is for).
 * One thread makes the calls; the watchdog only polls and aborts.
 */
final class NcclComm implements AutoCloseable {
    /** Polls spent spinning before yielding, then parking, while waiting for an event. */
    private static final int SPIN_POLLS = 2_000;
    private static final int YIELD_POLLS = 4_000;
    private static final long PARK_NANOS = 50_000;
    private static final Logger LOG = LoggerFactory.getLogger(NcclComm.class);
    /** Whether {@link #noteCaptured} has warned about NCCL_GRAPH_MIXING_SUPPORT (once per process). */
    private static final AtomicBoolean MIXING_WARNED = new AtomicBoolean();

    /** How long an abort waits for the calling thread to leave an NCCL call before aborting under it. */
    private static final long ABORT_LOCK_WAIT_MS = 1_000;

    /** Work enqueued without a host wait: the event recorded behind it, what it was, when. */
    private record Pending(CUevent_st event, String what, long enqueuedNanos) {}

    private final ProcessGroup group;
    private final int device;
    private final ncclComm comm;
    private final CUevent_st done;
    private final Duration timeout;
    private final int[] asyncError = new int[1];
    private final int[] watchdogAsyncError = new int[1];
    private final ReentrantLock calls = new ReentrantLock();
    private final Object abortLock = new Object();
    private final Object watchLock = new Object();
    private final ConcurrentLinkedQueue<Pending> pending = new ConcurrentLinkedQueue<>();
    private final ConcurrentLinkedQueue<CUevent_st> freeEvents = new ConcurrentLinkedQueue<>();
    private final ArrayDeque<CUevent_st> handleEvents = new ArrayDeque<>();
    private CUstream_st side;
    private CUevent_st sideReady;
    private CUevent_st sideTail;
    private boolean sideUnordered;
    private volatile String aborted;
    private volatile boolean closed;

    private NcclComm(ProcessGroup group, int device, ncclComm comm, CUevent_st done, Duration timeout) {
        this.group = group;
        this.device = device;
        this.comm = comm;
        this.done = done;
        this.timeout = timeout;
    }

    /**
     * Makes {@code device} the calling thread's current CUDA device.
     *
     * @param device CUDA device index
     * @throws IllegalStateException if there is no such device
     */
    static void selectDevice(int device) {
        int[] count = new int[1];
        int r = cudaGetDeviceCount(count);
        if (r != cudaSuccess) {
            throw new IllegalStateException("cudaGetDeviceCount failed: " + cudaError(r));
        }
        if (device < 0 || device >= count[0]) {
            throw new IllegalStateException("CUDA device " + device + " does not exist: this process sees " + count[0]
                    + " device(s) (LOCAL_RANK selects the device; check CUDA_VISIBLE_DEVICES)");
        }
        r = cudaSetDevice(device);
        if (r != cudaSuccess) {
            throw new IllegalStateException("cudaSetDevice(" + device + ") failed: " + cudaError(r));
        }
    }

    /** @return the NCCL library version found at run time, e.g. {@code 2.28.3} */
    static String version() {
        int[] v = new int[1];
        int r = ncclGetVersion(v);
        if (r != ncclSuccess) {
            throw new IllegalStateException("ncclGetVersion failed: " + ncclError(r));
        }
        return (v[0] / 10_000) + "." + (v[0] / 100 % 100) + "." + (v[0] % 100);
    }

    /** @return a fresh unique id (it opens NCCL's bootstrap listener in this process) */
    static UniqueId newUniqueId() {
        try (ncclUniqueId id = new ncclUniqueId()) {
            int r = ncclGetUniqueId(id);
            if (r != ncclSuccess) {
                throw new IllegalStateException("ncclGetUniqueId failed: " + ncclError(r));
            }
            byte[] bytes = new byte[UniqueId.BYTES];
            id.internal().get(bytes, 0, bytes.length);
            return new UniqueId(bytes);
        }
    }

    /**
     * Joins the communicator {@code id} names, as member {@code group.rank()} of {@code group.size()}
     * on {@code device}. Blocks until every member has joined ({@code ncclCommInitRank} has no
     * timeout: callers make sure every member is on its way first, see {@link CommIdExchange}).
     *
     * @param group the group
     * @param id the id group rank 0 made
     * @param device CUDA device of this process
     * @param timeout how long enqueued work may take before the communicator is aborted
     * @return the communicator, which the caller owns and must close
     * @throws CommunicationException if NCCL fails
     */
    static NcclComm init(ProcessGroup group, UniqueId id, int device, Duration timeout) {
        selectDevice(device);
        ncclComm comm = new ncclComm();
        int r;
        try (ncclUniqueId nid = new ncclUniqueId()) {
            nid.internal().put(id.bytes(), 0, UniqueId.BYTES);
            r = ncclCommInitRank(comm, group.size(), nid, group.rank());
        }
        if (r != ncclSuccess) {
            throw new CommunicationException(group.key(), CommIdExchange.OPERATION, List.of(),
                    "ncclCommInitRank failed: " + ncclError(r), null);
        }
        CUevent_st done = new CUevent_st();
        r = cudaEventCreateWithFlags(done, cudaEventDisableTiming);
        if (r != cudaSuccess) {
            ncclCommDestroy(comm);
            throw new CommunicationException(group.key(), CommIdExchange.OPERATION, List.of(),
                    "cudaEventCreateWithFlags failed: " + cudaError(r), null);
        }
        return new NcclComm(group, device, comm, done, timeout);
    }

    /** @return the NCCL handle to pass to collective calls */
    ncclComm handle() {
        return comm;
    }

    /**
     * @return the stream every call is enqueued on: the calling thread's {@link CurrentStream}, the legacy
     *     default stream unless the thread captures a CUDA graph
     */
    static CUstream_st stream() {
        return CurrentStream.get();
    }

    /**
     * Starts a section of NCCL calls on the calling thread's {@link #stream()}: takes the call lock, fails at once
     * if the communicator was aborted, makes its device current on the calling thread (events and the default
     * stream are per device), and makes that stream wait for the work started on the side stream so far (NCCL
     * needs one order of calls per communicator). Close the returned section to release the lock.
     *
     * @param what the operation, for errors
     * @return the open section
     * @throws CommunicationException if the communicator was aborted
     */
    Section enter(String what) {
        return enter(what, true);
    }

    /**
     * Starts a section that enqueues NCCL calls only on the side stream ({@link #sideStream}), or none (a
     * {@link #joinSideStream}): as {@link #enter(String)}, but the calling thread's stream does not wait for the
     * side stream's work. The side stream keeps the order by itself: it runs its calls one after the other, each
     * after the calling stream's work before it. (A wait here would hold the calling stream's kernels until the
     * collectives just started ahead of them had finished: ZeRO-3's prefetched all-gathers, in every backward
     * reduction that follows them.) While the thread captures a CUDA graph the section waits as
     * {@link #enter(String)}'s does, so that a capture rejoins side work at every section as before.
     *
     * @param what the operation, for errors
     * @return the open section
     * @throws CommunicationException if the communicator was aborted
     */
    Section enterForSideStream(String what) {
        return enter(what, false);
    }

    private Section enter(String what, boolean callsOnStream) {
        calls.lock();
        try {
            String why = aborted;
            if (why != null) {
                throw new CommunicationException(group.key(), what, List.of(),
                        "the NCCL communicator was aborted after an earlier failure: " + why, null);
            }
            int r = cudaSetDevice(device);
            if (r != cudaSuccess) {
                throw fail(what, "cudaSetDevice(" + device + ") failed: " + cudaError(r), List.of());
            }
            if (sideUnordered && (callsOnStream || CurrentStream.capturing())) {
                // work of this communicator on the side stream comes first: NCCL needs one order per communicator.
                // Side work queued before a graph capture began was joined into the default stream, which the
                // capture stream started after; a capture cannot wait on an event recorded outside it.
                sideUnordered = false;
                if (!CurrentStream.capturing() || isCapturing(side, what)) {
                    check(cudaEventRecord(sideTail, side), "cudaEventRecord", what, true);
                    check(cudaStreamWaitEvent(stream(), sideTail, 0), "cudaStreamWaitEvent", what, true);
                }
            }
            return calls::unlock;
        } catch (RuntimeException e) {
            calls.unlock();
            throw e;
        }
    }

    /**
     * The second stream for collectives started to overlap later work (created on first use,
     * non-blocking so that it does not synchronise with the legacy default stream), made to wait
     * for everything enqueued on the default stream so far. Call inside an {@link #enter} section,
     * then enqueue on the returned stream and finish with {@link #startedOnSideStream}.
     *
     * @param what the operation, for errors
     * @return the side stream
     */
    CUstream_st sideStream(String what) {
        if (side == null) {
            // highest priority: as the default stream's kernels retire, the collective's blocks get the SMs first
            int[] least = new int[1];
            int[] greatest = new int[1];
            check(cudaDeviceGetStreamPriorityRange(least, greatest), "cudaDeviceGetStreamPriorityRange", what, true);
            CUstream_st created = new CUstream_st();
            check(cudaStreamCreateWithPriority(created, cudaStreamNonBlocking, greatest[0]), "cudaStreamCreateWithPriority",
                    what, true);
            side = created;
            sideReady = newEvent(what);
            sideTail = newEvent(what);
        }
        check(cudaEventRecord(sideReady, stream()), "cudaEventRecord", what, true);
        check(cudaStreamWaitEvent(side, sideReady, 0), "cudaStreamWaitEvent", what, true);
        return side;
    }

    /**
     * Hands the work just enqueued on the side stream to the watchdog and returns an event behind
     * it for {@link #joinSideStream}. Call inside the {@link #enter} section that enqueued it.
     *
     * @param what the operation, for errors
     * @return the event; pass it to {@link #joinSideStream} exactly once
     */
    CUevent_st startedOnSideStream(String what) {
        enqueued(what, side);
        CUevent_st event = handleEvents.isEmpty() ? newEvent(what) : handleEvents.pop();
        check(cudaEventRecord(event, side), "cudaEventRecord", what, true);
        sideUnordered = true;
        return event;
    }

    /**
     * Makes the default stream wait for side-stream work (no host wait) and recycles its event.
     *
     * @param event what {@link #startedOnSideStream} returned
     * @param what the operation, for errors
     * @throws CommunicationException if the communicator was aborted
     */
    void joinSideStream(CUevent_st event, String what) {
        try (Section s = enterForSideStream(what)) {
            check(cudaStreamWaitEvent(stream(), event, 0), "cudaStreamWaitEvent", what, true);
            handleEvents.push(event);
        }
    }

    private boolean isCapturing(CUstream_st stream, String what) {
        int[] status = new int[1];
        check(cudaStreamIsCapturing(stream, status), "cudaStreamIsCapturing", what, true);
        return status[0] != cudaStreamCaptureStatusNone;
    }

    private CUevent_st newEvent(String what) {
        CUevent_st event = new CUevent_st();
        check(cudaEventCreateWithFlags(event, cudaEventDisableTiming), "cudaEventCreateWithFlags", what, true);
        return event;
    }

    /** A section of NCCL calls; closing it releases the call lock. */
    @FunctionalInterface
    interface Section extends AutoCloseable {
        @Override
        void close();
    }

    /**
     * Checks the result of an NCCL call made outside a group.
     *
     * @param result what the call returned
     * @param call the function's name
     * @param what the operation, for errors
     * @throws CommunicationException (after aborting) if the call failed
     */
    void check(int result, String call, String what) {
        if (result != ncclSuccess) {
            throw fail(what, call + " failed: " + ncclError(result) + lastError(), List.of());
        }
    }

    /** Checks the result of a CUDA runtime call ({@code cuda} true) made for operation {@code what}. */
    private void check(int result, String call, String what, boolean cuda) {
        if (result != cudaSuccess) {
            throw fail(what, call + " failed: " + cudaError(result), List.of());
        }
    }

    /**
     * Starts an NCCL group ({@code ncclGroupStart}); closing the returned value ends it.
     *
     * @param what the operation, for errors
     * @return the open group, to {@link Group#add} calls to and close
     */
    Group group(String what) {
        check(ncclGroupStart(), "ncclGroupStart", what);
        return new Group(what);
    }

    /**
     * Hands the work just enqueued to the watchdog: records an event behind it and returns without
     * waiting. Call inside the {@link #enter} section that enqueued it.
     *
     * @param what the operation, for errors
     * @throws CommunicationException (after aborting) if the event cannot be recorded
     */
    void enqueued(String what) {
        enqueued(what, stream());
    }

    private void enqueued(String what, CUstream_st on) {
        if (CurrentStream.capturing()) {
            noteCaptured(System.getenv("NCCL_GRAPH_MIXING_SUPPORT"));
            return; // recorded into a CUDA graph, not run: each replay's work is the replaying step's to wait for
        }
        CUevent_st event = freeEvents.poll();
        if (event == null) {
            event = newEvent(what);
        }
        int r = cudaEventRecord(event, on);
        if (r != cudaSuccess) {
            freeEvents.add(event);
            throw fail(what, "cudaEventRecord failed: " + cudaError(r), List.of());
        }
        pending.add(new Pending(event, what, System.nanoTime()));
    }

    /**
     * Warns, once per process, when a CUDA graph captures NCCL work while NCCL's graph mixing support is on
     * ({@code NCCL_GRAPH_MIXING_SUPPORT} unset or not 0). NCCL then puts an external event wait and record around
     * every captured collective, so that captured and uncaptured NCCL work may run at the same time; in a replay
     * they hold the GPU idle between kernels. mcore4j never runs a graph's NCCL work beside other NCCL work (what
     * follows a replay is queued behind it), so the support buys nothing here.
     *
     * @param setting the variable's value, or null when unset
     * @return whether this call warned
     */
    static boolean noteCaptured(String setting) {
        if ("0".equals(setting) || !MIXING_WARNED.compareAndSet(false, true)) {
            return false;
        }
        LOG.warn("a CUDA graph captures NCCL collectives with NCCL_GRAPH_MIXING_SUPPORT={}: NCCL puts an external event"
                + " wait before each of them, which idles the GPU in every replay (the 1.3B model at TP2 with sequence"
                + " parallelism on 2 H200s: 41,206 tokens/s/GPU, 47,319 with 0). mcore4j never runs a graph's NCCL work"
                + " beside other NCCL work: set NCCL_GRAPH_MIXING_SUPPORT=0 (scripts/gpu/host-env.sh does)",
                setting == null ? "(unset: 1)" : setting);
        return true;
    }

    /**
     * Waits on the host until everything enqueued so far on the default stream (in particular this
     * communicator's last calls) has finished.
     *
     * @param what the operation, for errors
     * @param timeout how long to wait
     * @throws CommunicationException (after aborting) on an NCCL or CUDA error, at the timeout, or
     *         if the watchdog aborts the communicator meanwhile
     */
    void await(String what, Duration timeout) {
        if (CurrentStream.capturing()) {
            throw new IllegalStateException(group.key() + " " + what + ": waits for the device, which a CUDA graph"
                    + " capture cannot (the work is recorded, not run)");
        }
        int r = cudaEventRecord(done, stream());
        if (r != cudaSuccess) {
            throw fail(what, "cudaEventRecord failed: " + cudaError(r), List.of());
        }
        long start = System.nanoTime();
        long limit = timeout.toNanos();
        for (int polls = 0; ; polls++) {
            String why = aborted;
            if (why != null) {
                throw new CommunicationException(group.key(), what, List.of(),
                        "the NCCL communicator was aborted while waiting: " + why, null);
            }
            int q = cudaEventQuery(done);
            if (q == cudaSuccess) {
                return;
            }
            if (q != cudaErrorNotReady) {
                throw fail(what, "CUDA reported " + cudaError(q) + " while waiting for the operation", List.of());
            }
            int e = ncclCommGetAsyncError(comm, asyncError);
            if (e != ncclSuccess || (asyncError[0] != ncclSuccess && asyncError[0] != ncclInProgress)) {
                int code = e != ncclSuccess ? e : asyncError[0];
                throw fail(what, "NCCL reported " + ncclError(code) + lastError() + " while waiting for the operation", List.of());
            }
            if (System.nanoTime() - start > limit) {
                // the work stuck is the oldest unfinished operation, which this wait queued behind
                Pending head = pending.peek();
                if (head != null && cudaEventQuery(head.event()) == cudaErrorNotReady) {
                    throw fail(head.what(), timedOut(timeout) + " (" + what + " was waiting behind it)", List.of());
                }
                throw fail(what, timedOut(timeout), List.of());
            }
            if (polls < SPIN_POLLS) {
                Thread.onSpinWait();
            } else if (polls < YIELD_POLLS) {
                Thread.yield();
            } else {
                LockSupport.parkNanos(PARK_NANOS);
            }
        }
    }

    /**
     * One watchdog pass (on the watchdog's thread, with this communicator's device current):
     * retires finished work in order and aborts the communicator on an NCCL or CUDA error or when
     * the oldest unfinished work is older than the timeout.
     *
     * @param now {@link System#nanoTime()} of this pass
     * @return whether work is still outstanding
     */
    boolean watch(long now) {
        synchronized (watchLock) { // close() waits for a pass in progress before destroying the events
            return watchLocked(now);
        }
    }

    private boolean watchLocked(long now) {
        if (closed || aborted != null) {
            return false;
        }
        Pending head;
        while ((head = pending.peek()) != null) {
            int q = cudaEventQuery(head.event());
            if (q == cudaSuccess) {
                pending.poll();
                freeEvents.add(head.event());
                continue;
            }
            if (q != cudaErrorNotReady) {
                fail(head.what(), "CUDA reported " + cudaError(q) + " for the operation (noticed by the watchdog)", List.of());
                return false;
            }
            int e = ncclCommGetAsyncError(comm, watchdogAsyncError);
            if (e != ncclSuccess || (watchdogAsyncError[0] != ncclSuccess && watchdogAsyncError[0] != ncclInProgress)) {
                int code = e != ncclSuccess ? e : watchdogAsyncError[0];
                fail(head.what(), "NCCL reported " + ncclError(code) + " for the operation (noticed by the watchdog)", List.of());
                return false;
            }
            if (now - head.enqueuedNanos() > timeout.toNanos()) {
                fail(head.what(), timedOut(timeout) + " (noticed by the watchdog)", List.of());
                return false;
            }
            return true;
        }
        return false;
    }

    /** @return the CUDA device of this communicator */
    int device() {
        return device;
    }

    private String timedOut(Duration limit) {
        return "timed out after " + limit.toMillis() + " ms: the ranks of group " + group.key()
                + " (global " + Arrays.toString(group.ranks()) + ") did not all complete it; NCCL cannot tell"
                + " which rank is missing";
    }

    /**
     * Destroys the communicator ({@code ncclCommDestroy}) unless it was aborted, and its events.
     * Idempotent. Stop the watchdog first.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        calls.lock();
        try {
            closed = true;
            synchronized (watchLock) {
                destroy();
            }
        } finally {
            calls.unlock();
        }
    }

    /** Destroys the communicator and its events; called once, by {@link #close()}. */
    private void destroy() {
        cudaSetDevice(device);
        synchronized (abortLock) {
            if (aborted == null) {
                aborted = "the communicator is closed";
                ncclCommDestroy(comm);
            }
        }
        cudaEventDestroy(done);
        for (Pending p; (p = pending.poll()) != null; ) {
            cudaEventDestroy(p.event());
        }
        for (CUevent_st e; (e = freeEvents.poll()) != null; ) {
            cudaEventDestroy(e);
        }
        for (CUevent_st e : handleEvents) {
            cudaEventDestroy(e);
        }
        handleEvents.clear();
        if (side != null) {
            cudaEventDestroy(sideReady);
            cudaEventDestroy(sideTail);
            cudaStreamDestroy(side);
        }
    }

    /** The calls of one NCCL group; {@link #close()} ends the group and reports the first failure. */
    final class Group implements AutoCloseable {
        private final String what;
        private int firstError = ncclSuccess;
        private String firstCall;

        private Group(String what) {
            this.what = what;
        }

        /**
         * @param result what an NCCL call inside the group returned
         * @param call the function's name
         */
        void add(int result, String call) {
            if (result != ncclSuccess && firstError == ncclSuccess) {
                firstError = result;
                firstCall = call;
            }
        }

        /** Ends the group ({@code ncclGroupEnd}), then throws for the first failed call, if any. */
        @Override
        public void close() {
            int end = ncclGroupEnd();
            if (firstError != ncclSuccess) {
                throw fail(what, firstCall + " failed: " + ncclError(firstError) + lastError(), List.of());
            }
            check(end, "ncclGroupEnd", what);
        }
    }

    /** Aborts the communicator (once, from whichever thread gets here first) and describes the failure. */
    private CommunicationException fail(String what, String message, List<Integer> ranks) {
        synchronized (abortLock) {
            if (aborted == null) {
                aborted = what + ": " + message;
                LOG.warn("aborting the NCCL communicator of {} after {}: {}", group.key(), what, message);
                long start = System.nanoTime();
                boolean heldHere = calls.isHeldByCurrentThread();
                boolean locked = heldHere;
                if (!heldHere) {
                    try {
                        locked = calls.tryLock(ABORT_LOCK_WAIT_MS, TimeUnit.MILLISECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
                try {
                    int r = ncclCommAbort(comm);
                    LOG.warn("aborted the NCCL communicator of {} in {} ms (ncclCommAbort returned {}{})", group.key(),
                            (System.nanoTime() - start) / 1_000_000, r, locked ? "" : ", with a call still inside NCCL");
                } finally {
                    if (locked && !heldHere) {
                        calls.unlock();
                    }
                }
            }
        }
        return new CommunicationException(group.key(), what, ranks, message + "; the NCCL communicator is aborted", null);
    }

    /** NCCL's description of this thread's last error; empty once the communicator is freed. */
    private String lastError() {
        if (closed || aborted != null) {
            return "";
        }
        BytePointer p = ncclGetLastError(comm);
        String s = p == null || p.isNull() ? "" : p.getString();
        return s.isBlank() ? "" : " (" + s.trim() + ")";
    }

    private static String ncclError(int code) {
        BytePointer p = ncclGetErrorString(code);
        return (p == null || p.isNull() ? "error" : p.getString()) + " [ncclResult " + code + "]";
    }

    private static String cudaError(int code) {
        BytePointer p = cudaGetErrorString(code);
        return (p == null || p.isNull() ? "error" : p.getString()) + " [cudaError " + code + "]";
    }
}
