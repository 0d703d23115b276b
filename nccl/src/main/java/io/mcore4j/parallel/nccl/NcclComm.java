package io.mcore4j.parallel.nccl;

import static org.bytedeco.cuda.global.cudart.cudaErrorNotReady;
import static org.bytedeco.cuda.global.cudart.cudaEventCreateWithFlags;
import static org.bytedeco.cuda.global.cudart.cudaEventDestroy;
import static org.bytedeco.cuda.global.cudart.cudaEventDisableTiming;
import static org.bytedeco.cuda.global.cudart.cudaEventQuery;
import static org.bytedeco.cuda.global.cudart.cudaEventRecord;
import static org.bytedeco.cuda.global.cudart.cudaGetDeviceCount;
import static org.bytedeco.cuda.global.cudart.cudaGetErrorString;
import static org.bytedeco.cuda.global.cudart.cudaSetDevice;
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

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;

import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

import org.bytedeco.cuda.cudart.CUevent_st;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.nccl.ncclComm;
import org.bytedeco.cuda.nccl.ncclUniqueId;
import org.bytedeco.javacpp.BytePointer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One NCCL communicator ({@code ncclComm_t}) of one group, with the CUDA event used to wait for
 * its work, and the failure handling around both. Everything here calls CUDA or NCCL; the class is
 * only loaded when an {@link NcclBackend} is created.
 *
 * <p><b>Streams.</b> Every call is enqueued on the legacy default stream ({@code null}), the stream
 * DJL's libtorch ops run on: an NCCL call runs after the DJL ops enqueued before it and before
 * those enqueued after it, so inputs are ready and results are visible without extra
 * synchronisation.
 *
 * <p><b>Waiting and failure.</b> {@link #await} records an event behind the enqueued work and polls
 * it ({@code cudaEventQuery}), and while it waits polls {@code ncclCommGetAsyncError}. On an NCCL
 * error, a CUDA error or the timeout it aborts the communicator ({@code ncclCommAbort}, which also
 * stops its kernels) and throws a {@link CommunicationException} naming the group and the
 * operation. A timeout cannot name the missing rank (NCCL does not know it): the message names the
 * group's ranks. After an abort every call fails at once. Not thread-safe: one thread per communicator.
 */
final class NcclComm implements AutoCloseable {
    /** Polls spent spinning before yielding, then parking, while waiting for an event. */
    private static final int SPIN_POLLS = 2_000;
    private static final int YIELD_POLLS = 4_000;
    private static final long PARK_NANOS = 50_000;
    private static final Logger LOG = LoggerFactory.getLogger(NcclComm.class);

    private final ProcessGroup group;
    private final int device;
    private final ncclComm comm;
    private final CUevent_st done;
    private final int[] asyncError = new int[1];
    private String aborted;
    private boolean closed;

    private NcclComm(ProcessGroup group, int device, ncclComm comm, CUevent_st done) {
        this.group = group;
        this.device = device;
        this.comm = comm;
        this.done = done;
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
     * @return the communicator, which the caller owns and must close
     * @throws CommunicationException if NCCL fails
     */
    static NcclComm init(ProcessGroup group, UniqueId id, int device) {
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
        return new NcclComm(group, device, comm, done);
    }

    /** @return the NCCL handle to pass to collective calls */
    ncclComm handle() {
        return comm;
    }

    /** @return the stream every call is enqueued on: the legacy default stream */
    static CUstream_st stream() {
        return null;
    }

    /**
     * Makes this communicator's device current on the calling thread (events and the default
     * stream are per device), and fails at once if the communicator was aborted.
     *
     * @param what the operation, for errors
     */
    void makeCurrent(String what) {
        if (aborted != null) {
            throw new CommunicationException(group.key(), what, List.of(),
                    "the NCCL communicator was aborted after an earlier failure: " + aborted, null);
        }
        int r = cudaSetDevice(device);
        if (r != cudaSuccess) {
            throw fail(what, "cudaSetDevice(" + device + ") failed: " + cudaError(r), List.of());
        }
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
     * Waits until everything enqueued so far on the default stream (in particular this
     * communicator's last calls) has finished.
     *
     * @param what the operation, for errors
     * @param timeout how long to wait
     * @throws CommunicationException (after aborting) on an NCCL or CUDA error or at the timeout
     */
    void await(String what, Duration timeout) {
        int r = cudaEventRecord(done, stream());
        if (r != cudaSuccess) {
            throw fail(what, "cudaEventRecord failed: " + cudaError(r), List.of());
        }
        long start = System.nanoTime();
        long limit = timeout.toNanos();
        for (int polls = 0; ; polls++) {
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
                throw fail(what, "timed out after " + timeout.toMillis() + " ms: the ranks of group " + group.key()
                        + " (global " + Arrays.toString(group.ranks()) + ") did not all complete it; NCCL cannot tell"
                        + " which rank is missing", List.of());
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

    /** @return whether the communicator was aborted (it then fails every call) */
    boolean isAborted() {
        return aborted != null;
    }

    /** Destroys the communicator ({@code ncclCommDestroy}) unless it was aborted, and its event. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        cudaSetDevice(device);
        if (aborted == null) {
            aborted = "the communicator is closed";
            ncclCommDestroy(comm);
        }
        cudaEventDestroy(done);
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

    private CommunicationException fail(String what, String message, List<Integer> ranks) {
        if (aborted == null) {
            aborted = message;
            LOG.warn("aborting the NCCL communicator of {} after {}: {}", group.key(), what, message);
            long start = System.nanoTime();
            int r = ncclCommAbort(comm);
            LOG.warn("aborted the NCCL communicator of {} in {} ms (ncclCommAbort returned {})", group.key(),
                    (System.nanoTime() - start) / 1_000_000, r);
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
