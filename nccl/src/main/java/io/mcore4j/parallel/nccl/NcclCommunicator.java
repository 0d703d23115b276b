package io.mcore4j.parallel.nccl;

import static io.mcore4j.parallel.CollectiveResults.copyOwnedBy;
import static io.mcore4j.parallel.CollectiveResults.withoutGrad;
import static io.mcore4j.cuda.DevicePointers.address;
import static io.mcore4j.cuda.DevicePointers.bytes;
import static io.mcore4j.cuda.DevicePointers.pointer;
import static org.bytedeco.cuda.global.nccl.ncclAllGather;
import static org.bytedeco.cuda.global.nccl.ncclAllReduce;
import static org.bytedeco.cuda.global.nccl.ncclBroadcast;
import static org.bytedeco.cuda.global.nccl.ncclRecv;
import static org.bytedeco.cuda.global.nccl.ncclReduce;
import static org.bytedeco.cuda.global.nccl.ncclReduceScatter;
import static org.bytedeco.cuda.global.nccl.ncclSend;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;
import io.mcore4j.cuda.CurrentStream;
import io.mcore4j.cuda.SlotSum;
import io.mcore4j.parallel.ChunkLayout;
import io.mcore4j.parallel.CollectiveArguments;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.PendingCollective;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.ReduceOp;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.function.Supplier;

import org.bytedeco.cuda.cudart.CUevent_st;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.javacpp.Pointer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Collectives of one group with NCCL on CUDA tensors of this process's device.
 *
 * <p>Every call enqueues NCCL work on the default stream behind the caller's DJL ops (see
 * {@link NcclComm}). Collectives (all-reduce, all-gather, reduce-scatter, broadcast, all-to-all)
 * return as soon as the work is enqueued: their results are tensors whose contents become valid in
 * stream order, so later DJL ops (and host reads, which synchronise) see them complete, while the
 * host runs ahead. The backend's {@link NcclWatchdog} tracks that work: if it fails or is not done
 * {@link #timeout()} after it was enqueued, the communicator is aborted and the next call on it
 * throws a {@link CommunicationException} naming the group and the failed operation. Send,
 * receive, barrier and all-gather-bytes wait on the host until their work has finished (or fail
 * at the timeout), so a stalled or dead peer surfaces in them directly.
 * <ul>
 *   <li>all-reduce: {@code ncclAllReduce}; AVG is {@code ncclAvg}. Sums are NCCL's (ring or tree
 *       order), not the rank order of the CPU backends, so floating results may differ from theirs
 *       in the last bits; every member still gets the same result.</li>
 *   <li>all-gather and reduce-scatter: {@code ncclAllGather} / {@code ncclReduceScatter} on
 *       rank-major buffers; along a dim other than 0 the data is rearranged on the device first
 *       or afterwards ({@link RankMajorLayout}).</li>
 *   <li>broadcast: {@code ncclBroadcast}. send / recv: {@code ncclSend} / {@code ncclRecv}; a send
 *       returns once the peer has received (synchronous, which the pipeline schedules allow for).
 *       Sending to oneself keeps a copy until the matching receive.</li>
 *   <li>all-to-all: one NCCL group of an {@code ncclSend} and an {@code ncclRecv} per peer
 *       (empty slices skipped).</li>
 *   <li>all-gather-bytes: an int64 all-gather of the lengths, then a uint8 all-gather of the
 *       payloads padded to the longest, on the device; barrier: an all-reduce of one int32.</li>
 * </ul>
 * Inside CUDA graph captures (by default; {@link #PEER_COPIES}) the started all-gathers and all-to-alls of a group
 * on one host travel by the GPUs' copy engines instead ({@link PeerCopies}).
 *
 * <p>Transfers larger than the chunk size are split into several NCCL calls ({@link ChunkPlan}); a
 * chunked all-gather or reduce-scatter is a group of one broadcast (or reduce) per rank per chunk.
 *
 * <p>What NCCL cannot check: mismatched shapes, dtypes or operations across members and wrong
 * all-to-all receive splits are not detected as such (they corrupt data or stall until the
 * timeout); a receive checks only that its own arguments are valid.
 *
 * <p>A group of one member has no NCCL communicator: its collectives are copies, on any device.
 * Non-contiguous inputs are copied to contiguous memory first. Results are new tensors owned by the
 * {@code owner} passed in, on the input's device, and not attached to autograd.
 */
final class NcclCommunicator implements Communicator, AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(NcclCommunicator.class);
    /**
     * When the started all-gathers ({@link #startAllGatherInto}, {@link #startAllGather}) and all-to-alls
     * ({@link #startAllToAll}) of a group whose members share a host travel by the GPUs' copy engines
     * ({@link PeerCopies}) instead of NCCL's kernels: {@code -Dmcore4j.nccl.peerCopies=off}, {@code capture} (the
     * default: inside a CUDA graph capture, for the groups that started such transfers in the eager steps before it;
     * NCCL's kernels stalled the replayed step of the 1.3B model at TP2 with {@code --tp-comm-overlap} on 2×H200) or
     * {@code on} (every started transfer, eager steps too). The all-to-alls that are not started
     * ({@link #allToAll}, {@link #allToAllChunks}) go there inside captures only, under {@code capture} and {@code on}.
     */
    enum PeerCopyMode { OFF, CAPTURE, ON }

    static final PeerCopyMode PEER_COPIES = peerCopyMode(System.getProperty("mcore4j.nccl.peerCopies", "capture"));
    /**
     * Which sums go by copy engine where {@link #PEER_COPIES} sends the started transfers there,
     * {@code -Dmcore4j.nccl.peerReductions=}: {@code false} (the default) none; {@code started} the started ones, which
     * overlap the caller's work ({@link #startAllReduceInPlace}, {@link #startReduceScatter}); {@code true} those and the
     * all-reduces that return a new tensor ({@link #allReduce}). Each of float32, float16 and bfloat16 tensors whose
     * per-rank parts are 16-byte multiples ({@link PeerCopies#allReduce}, {@link PeerCopies#reduceScatter}). On
     * 4×H200 under a CUDA graph, {@code true} measured slower than NCCL's kernels (the 1.3B model: TP2 46,950 against
     * 49,228 tokens/s/GPU, TP4 25,218 against 34,662): off by default.
     */
    enum PeerReductions { NONE, STARTED, ALL }

    static final PeerReductions PEER_REDUCTIONS = peerReductions(System.getProperty("mcore4j.nccl.peerReductions", "false"));

    static PeerReductions peerReductions(String value) {
        return switch (value) {
            case "false", "off" -> PeerReductions.NONE;
            case "started" -> PeerReductions.STARTED;
            case "true", "on" -> PeerReductions.ALL;
            default -> throw new IllegalArgumentException("-Dmcore4j.nccl.peerReductions=" + value
                    + ": expected false, started or true");
        };
    }
    /** {@code -Dmcore4j.nccl.peerCopySlotBytes} (16 MiB): the largest piece of one message per handshake. */
    static final long PEER_COPY_SLOT_BYTES = Long.getLong("mcore4j.nccl.peerCopySlotBytes", 16L << 20);

    static PeerCopyMode peerCopyMode(String value) {
        return switch (value) {
            case "off", "false" -> PeerCopyMode.OFF;
            case "capture" -> PeerCopyMode.CAPTURE;
            case "on", "true" -> PeerCopyMode.ON;
            default -> throw new IllegalArgumentException("-Dmcore4j.nccl.peerCopies=" + value
                    + ": expected off, capture or on");
        };
    }

    private final ProcessGroup group;
    private final NcclComm comm;
    private final Device device;
    private final Duration timeout;
    private final long chunkBytes;
    private final NDManager internal;
    private final CollectiveArguments args;
    private final ArrayDeque<NDArray> sentToSelf = new ArrayDeque<>();
    private CommunicationException broken;
    private boolean closed;
    /** The copy-engine transfers of the started all-gathers and all-to-alls, once opened; see {@link #peerCopies()}. */
    private PeerCopies peerCopies;
    private boolean peerCopiesTried;
    /** The copy-engine all-reduce's summing kernel, loaded at its first use. */
    private SlotSum slotSum;
    /** Whether this communicator started an all-gather or all-to-all outside a capture (then a capture may too). */
    private boolean startedTransfers;

    /**
     * @param group the group
     * @param comm its NCCL communicator, or null for a group of one (owned from now on)
     * @param device this process's CUDA device
     * @param timeout how long a call waits for its peers
     * @param chunkBytes largest transfer per NCCL call
     * @param internal manager for this communicator's own tensors (owned from now on)
     */
    NcclCommunicator(ProcessGroup group, NcclComm comm, Device device, Duration timeout, long chunkBytes, NDManager internal) {
        if ((comm == null) != (group.size() == 1)) {
            throw new IllegalArgumentException("group " + group + " of size " + group.size()
                    + (comm == null ? " needs" : " must not have") + " an NCCL communicator");
        }
        if (chunkBytes < 1) {
            throw new IllegalArgumentException("chunk size must be at least one byte, got " + chunkBytes);
        }
        this.group = group;
        this.comm = comm;
        this.device = Objects.requireNonNull(device, "device");
        this.timeout = Objects.requireNonNull(timeout, "timeout");
        this.chunkBytes = chunkBytes;
        this.internal = Objects.requireNonNull(internal, "internal");
        this.args = new CollectiveArguments(group, "NCCL", NcclCodes.SUPPORTED);
    }

    @Override
    public ProcessGroup group() {
        return group;
    }

    @Override
    public Duration timeout() {
        return timeout;
    }

    @Override
    public NDArray allReduce(NDArray input, ReduceOp op, NDManager owner) {
        String what = describe("all-reduce " + op, input);
        PeerCopies peers = peerReduction(input, op, false);
        return run(what, () -> {
            if (comm == null) {
                return copyOwnedBy(input, owner);
            }
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray src = TensorMemory.contiguous(input, temp);
                NDArray out = DataTypes.empty(temp, input.getShape(), DataTypes.of(input), temp.getDevice());
                if (peers != null) {
                    peers.allReduce(address(src), address(out), bytes(src), DataTypes.of(src),
                            new PeerCopies.StreamQueue(NcclComm.stream(), slotSum()));
                    comm.enqueued(what);
                } else {
                    reduce(what, src, out, op, false);
                }
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public void allReduceInPlace(NDArray tensor, ReduceOp op) {
        String what = describe("all-reduce " + op, tensor);
        run(what, () -> {
            if (comm == null) {
                return tensor;
            }
            if (TensorMemory.isContiguous(tensor)) {
                reduce(what, tensor, tensor, op, false);
                return tensor;
            }
            try (NDManager temp = tensor.getManager().newSubManager(device)) {
                NDArray work = TensorMemory.contiguous(tensor, temp);
                reduce(what, work, work, op, false);
                Tensors.copyInto(tensor, work);
            }
            return tensor;
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: enqueued on this communicator's side stream after the caller's work so far; the
     * caller's stream waits for it at {@link PendingCollective#await()}.
     */
    @Override
    public PendingCollective startAllReduceInPlace(NDArray tensor, ReduceOp op) {
        String what = describe("all-reduce " + op, tensor);
        requireContiguous(what, tensor);
        PeerCopies peers = peerReduction(tensor, op, true);
        return runOnSideStream(what, () -> {
            if (comm == null) {
                return () -> tensor;
            }
            CUstream_st on = comm.sideStream(what);
            if (peers != null) {
                peers.allReduce(address(tensor), address(tensor), bytes(tensor), DataTypes.of(tensor),
                        new PeerCopies.StreamQueue(on, slotSum()));
            } else {
                enqueueAllReduce(what, tensor, tensor, op, on);
            }
            return joinLater(what, comm.startedOnSideStream(what), tensor);
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: as {@link #startAllReduceInPlace}; the result is allocated before the collective is
     * enqueued.
     */
    @Override
    public PendingCollective startReduceScatter(NDArray input, ReduceOp op, NDManager owner) {
        int d = args.checkScatterDim(input, 0);
        String what = describe("reduce-scatter " + op + " dim " + d, input);
        requireContiguous(what, input);
        PeerCopies peers = peerReduction(input, op, true);
        return runOnSideStream(what, () -> {
            if (comm == null) {
                NDArray out = copyOwnedBy(input, owner);
                return () -> out;
            }
            NDArray out = DataTypes.empty(owner, RankMajorLayout.scattered(input.getShape(), 0, size()), DataTypes.of(input), owner.getDevice());
            CUstream_st on = comm.sideStream(what);
            if (peers != null) {
                // the parts land in a tensor the caller's manager holds until it awaits, as it holds the result
                NDArray scratch = DataTypes.empty(owner, input.getShape(), DataTypes.of(input), owner.getDevice());
                peers.reduceScatter(address(input), address(scratch), address(out), bytes(input), DataTypes.of(input),
                        new PeerCopies.StreamQueue(on, slotSum()));
            } else {
                enqueueReduceScatter(what, input, out, op, on);
            }
            return joinLater(what, comm.startedOnSideStream(what), out);
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: {@link #startAllGatherInto} a result allocated first.
     */
    @Override
    public PendingCollective startAllGather(NDArray input, NDManager owner) {
        args.checkDim(input, 0);
        NDArray out = DataTypes.empty(owner, RankMajorLayout.gathered(input.getShape(), 0, size()), DataTypes.of(input),
                owner.getDevice());
        return startAllGatherInto(input, out);
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: {@code ncclAllGather} straight into {@code output}'s memory, on the caller's stream.
     */
    @Override
    public void allGatherInto(NDArray input, NDArray output) {
        String what = describe("all-gather into", input);
        run(what, () -> {
            checkGatherTarget(what, input, output);
            if (comm == null) {
                Tensors.copyInto(output, input);
                return output;
            }
            try (NDManager temp = output.getManager().newSubManager(device)) {
                gather(what, TensorMemory.contiguous(input, temp), output, false);
            }
            return output;
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: as {@link #startAllReduceInPlace}, into {@code output}'s memory.
     */
    @Override
    public PendingCollective startAllGatherInto(NDArray input, NDArray output) {
        String what = describe("all-gather into", input);
        requireContiguous(what, input);
        PeerCopies peers = peerCopies();
        return runOnSideStream(what, () -> {
            checkGatherTarget(what, input, output);
            if (comm == null) {
                Tensors.copyInto(output, input);
                return () -> output;
            }
            CUstream_st on = comm.sideStream(what);
            if (peers != null) {
                peers.exchange(address(input), PeerCopies.Pieces.same(size(), bytes(input)), address(output),
                        PeerCopies.Pieces.rankMajor(size(), bytes(input)), new PeerCopies.StreamQueue(on, null));
            } else {
                enqueueAllGather(what, input, output, on);
            }
            return joinLater(what, comm.startedOnSideStream(what), output);
        });
    }

    /**
     * The copy-engine transfers for a started all-gather or all-to-all being queued now, or null for NCCL's kernels
     * ({@link #PEER_COPIES}): with {@code on}, opened at the first one; with {@code capture}, inside a capture, where
     * {@link #prepareCapture()} opened them. The choice is the same on every member: they start the same transfers
     * in the same order and capture at the same step.
     */
    private PeerCopies peerCopies() {
        if (comm == null || PEER_COPIES == PeerCopyMode.OFF) {
            return null;
        }
        boolean capturing = CurrentStream.capturing();
        if (!capturing) {
            startedTransfers = true;
        }
        if (PEER_COPIES == PeerCopyMode.ON && !capturing) {
            openPeerCopies();
        }
        return PEER_COPIES == PeerCopyMode.ON || capturing ? peerCopies : null;
    }

    /**
     * The copy-engine transfers for an all-to-all that is not started (the experts' dispatch and combine): inside a
     * capture, where {@link #prepareCapture()} opened them (NCCL's sends and receives stalled the replayed step of the
     * 1.3B MoE model at EP4 on 4×H200, as they had the started ones of {@code --tp-comm-overlap}); eager ones stay on
     * NCCL's kernels. As {@link #peerCopies()}, an eager call marks the group for {@link #prepareCapture()}.
     */
    private PeerCopies capturedPeerCopies() {
        PeerCopies peers = peerCopies();
        return CurrentStream.capturing() ? peers : null;
    }

    /**
     * The copy-engine transfers for a sum of {@code t} over the group, started ({@code started}) or not, as
     * {@link #PEER_REDUCTIONS} says; or null for NCCL's kernels.
     */
    private PeerCopies peerReduction(NDArray t, ReduceOp op, boolean started) {
        boolean chosen = PEER_REDUCTIONS == PeerReductions.ALL || started && PEER_REDUCTIONS == PeerReductions.STARTED;
        if (!chosen || op != ReduceOp.SUM) {
            return null;
        }
        PeerCopies peers = peerCopies();
        return peers != null && peers.reduces(t.size(), DataTypes.of(t)) ? peers : null;
    }

    private SlotSum slotSum() {
        if (slotSum == null) {
            slotSum = SlotSum.forDevice(comm.device());
        }
        return slotSum;
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: opens the copy-engine transfers ({@link PeerCopies}) of a group that started all-gathers or all-to-alls
     * in the eager steps, unless {@code -Dmcore4j.nccl.peerCopies=off}.
     */
    @Override
    public void prepareCapture() {
        if (startedTransfers) { // set only where the transport may be used (a communicator, peerCopies not off)
            openPeerCopies();
        }
    }

    /** Opens the copy-engine transfers once (a collective call of the group); one log line says how it went. */
    private void openPeerCopies() {
        if (peerCopiesTried) {
            return;
        }
        peerCopiesTried = true;
        String[] why = {null};
        peerCopies = PeerCopies.open(rank(), size(), comm.device(), PEER_COPY_SLOT_BYTES, this::allGatherBytes, why);
        if (peerCopies == null) {
            LOG.info("{}: started all-gathers and all-to-alls stay on NCCL's kernels: {}", group.key(), why[0]);
        } else if (rank() == 0) {
            LOG.info("{}: started all-gathers and all-to-alls travel by copy engine{} ({} bytes per handshake)",
                    group.key(), PEER_COPIES == PeerCopyMode.CAPTURE ? " in CUDA graphs" : "", PEER_COPY_SLOT_BYTES);
        }
    }

    private void checkGatherTarget(String what, NDArray input, NDArray output) {
        Shape expected = RankMajorLayout.gathered(input.getShape(), 0, size());
        if (!output.getShape().equals(expected) || DataTypes.of(output) != DataTypes.of(input)) {
            throw new IllegalArgumentException(group.key() + " " + what + ": the output is " + DataTypes.of(output) + " "
                    + output.getShape() + ", the gathered pieces " + DataTypes.of(input) + " " + expected);
        }
        if (!TensorMemory.isContiguous(output)) {
            throw new IllegalArgumentException(group.key() + " " + what + ": the output must be contiguous");
        }
    }

    private PendingCollective joinLater(String what, CUevent_st event, NDArray result) {
        boolean[] joined = {false};
        return () -> {
            if (joined[0]) {
                throw new IllegalStateException(group.key() + " " + what + ": await() was already called");
            }
            joined[0] = true;
            comm.joinSideStream(event, what);
            return result;
        };
    }

    private void requireContiguous(String what, NDArray t) {
        if (comm != null && !TensorMemory.isContiguous(t)) {
            throw new IllegalArgumentException(group.key() + " " + what + ": a started collective needs a contiguous tensor"
                    + " (it is read after the call returns, so no temporary copy can stand in for it)");
        }
    }

    @Override
    public NDArray allGather(NDArray input, int dim, NDManager owner) {
        int d = args.checkDim(input, dim);
        String what = describe("all-gather dim " + d, input);
        return run(what, () -> {
            if (comm == null) {
                return copyOwnedBy(input, owner);
            }
            try (NDManager temp = owner.newSubManager(device)) {
                Shape piece = input.getShape();
                NDArray src = TensorMemory.contiguous(input, temp);
                NDArray buffer = DataTypes.empty(temp, d == 0 ? RankMajorLayout.gathered(piece, 0, size())
                        : RankMajorLayout.gatherBuffer(piece, size()), DataTypes.of(input), temp.getDevice());
                gather(what, src, buffer, false);
                NDArray out = d == 0 ? buffer : RankMajorLayout.fromGatherBuffer(buffer, piece, d, size(), temp);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public NDArray reduceScatter(NDArray input, int dim, ReduceOp op, NDManager owner) {
        int d = args.checkScatterDim(input, dim);
        String what = describe("reduce-scatter " + op + " dim " + d, input);
        return run(what, () -> {
            if (comm == null) {
                return copyOwnedBy(input, owner);
            }
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray src = d == 0 ? TensorMemory.contiguous(input, temp) : RankMajorLayout.toScatterBuffer(input, d, size(), temp);
                NDArray out = DataTypes.empty(temp, RankMajorLayout.scattered(input.getShape(), d, size()), DataTypes.of(input), temp.getDevice());
                scatter(what, src, out, op);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public NDArray broadcast(NDArray input, int root, NDManager owner) {
        args.checkPeer(root, "broadcast root");
        String what = describe("broadcast from " + root, input);
        return run(what, () -> {
            if (comm == null) {
                return copyOwnedBy(input, owner);
            }
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray out = DataTypes.empty(temp, input.getShape(), DataTypes.of(input), temp.getDevice());
                long to = address(out);
                long from = rank() == root ? address(TensorMemory.contiguous(input, temp)) : to;
                int dt = NcclCodes.dataType(DataTypes.of(input));
                int es = DataTypes.of(input).getNumOfBytes();
                ChunkPlan plan = ChunkPlan.of(input.size(), es, chunkBytes);
                for (int c = 0; c < plan.chunks(); c++) {
                    long off = plan.offset(c) * es;
                    comm.check(ncclBroadcast(pointer(from + off), pointer(to + off), plan.length(c), dt, root, comm.handle(),
                            NcclComm.stream()), "ncclBroadcast", what);
                }
                comm.enqueued(what);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public NDArray allToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        long totalRows = args.checkSplits(input, sendSplits, recvSplits);
        String what = CollectiveArguments.describeAllToAll(input);
        checkTensor(what, input);
        Shape rest = input.getShape().slice(1);
        PeerCopies peers = capturedPeerCopies();
        return run(what, () -> {
            if (comm == null) {
                return exchangeWithSelf(what, input, sendSplits, recvSplits, owner);
            }
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray src = TensorMemory.contiguous(input, temp);
                NDArray out = DataTypes.empty(temp, new Shape(totalRows).addAll(rest), DataTypes.of(input), temp.getDevice());
                exchangeChunks(what, peers, src, out, ChunkLayout.consecutive(perPeer(sendSplits)),
                        ChunkLayout.consecutive(perPeer(recvSplits)), NcclComm.stream());
                comm.enqueued(what);
                out.attach(owner);
                return out;
            }
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: as {@link #startAllReduceInPlace}: the sends and receives run on the side stream, so
     * the caller's kernels overlap them until {@link PendingCollective#await()}; {@code input} must
     * be contiguous and stay alive until then.
     */
    @Override
    public PendingCollective startAllToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        long totalRows = args.checkSplits(input, sendSplits, recvSplits);
        String what = CollectiveArguments.describeAllToAll(input);
        checkTensor(what, input);
        requireContiguous(what, input);
        Shape rest = input.getShape().slice(1);
        PeerCopies peers = peerCopies();
        return runOnSideStream(what, () -> {
            if (comm == null) {
                NDArray out = exchangeWithSelf(what, input, sendSplits, recvSplits, owner);
                return () -> out;
            }
            NDArray out = DataTypes.empty(owner, new Shape(totalRows).addAll(rest), DataTypes.of(input), owner.getDevice());
            exchangeChunks(what, peers, input, out, ChunkLayout.consecutive(perPeer(sendSplits)),
                    ChunkLayout.consecutive(perPeer(recvSplits)), comm.sideStream(what));
            return joinLater(what, comm.startedOnSideStream(what), out);
        });
    }

    /** The all-to-all of a group of one: its rows to itself, which must be as many as it expects. */
    private NDArray exchangeWithSelf(String what, NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        if (recvSplits[0] != sendSplits[0]) {
            throw args.unexpectedRows(what, 0, sendSplits[0], recvSplits[0]);
        }
        return copyOwnedBy(input, owner);
    }

    /** One chunk per peer of the given rows. */
    private static long[][] perPeer(long[] splits) {
        long[][] out = new long[splits.length][];
        for (int j = 0; j < splits.length; j++) {
            out[j] = new long[] {splits[j]};
        }
        return out;
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: one send per chunk from its rows of {@code input} and one receive per chunk straight into its rows of
     * the result, all in one group: no gather, no concatenation.
     */
    @Override
    public NDArray allToAllChunks(NDArray input, ChunkLayout send, ChunkLayout recv, NDManager owner) {
        if (comm == null) {
            return Communicator.super.allToAllChunks(input, send, recv, owner);
        }
        ChunkLayout.checkExchange(group(), input, send, recv);
        String what = CollectiveArguments.describeAllToAll(input);
        checkTensor(what, input);
        Shape rest = input.getShape().slice(1);
        PeerCopies peers = capturedPeerCopies();
        return run(what, () -> {
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray src = TensorMemory.contiguous(input, temp);
                NDArray out = DataTypes.empty(temp, new Shape(recv.rows()).addAll(rest), DataTypes.of(input), temp.getDevice());
                exchangeChunks(what, peers, src, out, send, recv, NcclComm.stream());
                comm.enqueued(what);
                out.attach(owner);
                return out;
            }
        });
    }

    /**
     * {@inheritDoc}
     *
     * <p>NCCL: as {@link #startAllReduceInPlace}: {@link #allToAllChunks}' sends and receives, straight into
     * {@code output}'s rows, on the side stream, so the caller's kernels overlap them until
     * {@link PendingCollective#await()}.
     */
    @Override
    public PendingCollective startAllToAllChunks(NDArray input, ChunkLayout send, ChunkLayout recv, NDArray output) {
        if (comm == null) {
            return Communicator.super.startAllToAllChunks(input, send, recv, output);
        }
        ChunkLayout.checkExchange(group(), input, send, recv);
        ChunkLayout.checkTarget(group(), input, recv, output);
        String what = CollectiveArguments.describeAllToAll(input);
        checkTensor(what, input);
        requireContiguous(what, input);
        return runOnSideStream(what, () -> {
            CUstream_st on = comm.sideStream(what);
            enqueueChunks(what, input, output, send, recv, on);
            return joinLater(what, comm.startedOnSideStream(what), output);
        });
    }

    /**
     * {@link #enqueueChunks} on {@code on}, or with {@code peers} the same exchange by copy engine
     * ({@link PeerCopies#exchange}) on that stream.
     */
    private void exchangeChunks(String what, PeerCopies peers, NDArray src, NDArray out, ChunkLayout send,
                                ChunkLayout recv, CUstream_st on) {
        if (peers == null) {
            enqueueChunks(what, src, out, send, recv, on);
            return;
        }
        long rowBytes = src.getShape().slice(1).size() * DataTypes.of(src).getNumOfBytes();
        peers.exchange(address(src), PeerCopies.Pieces.of(send, rowBytes), address(out),
                PeerCopies.Pieces.of(recv, rowBytes), new PeerCopies.StreamQueue(on, null));
    }

    /**
     * Each chunk {@code send} lists for peer {@code j} goes from its rows of {@code src} to rank {@code j}, in order;
     * each chunk {@code recv} lists for peer {@code i} comes from rank {@code i} into its rows of {@code out}, in
     * order. Messages above the chunk size are cut alike on both sides.
     */
    private void enqueueChunks(String what, NDArray src, NDArray out, ChunkLayout send, ChunkLayout recv, CUstream_st on) {
        long rowElements = src.getShape().slice(1).size();
        DataType dtype = DataTypes.of(src);
        try (NcclComm.Group calls = comm.group(what)) {
            for (int j = 0; j < size(); j++) {
                postChunks(calls, true, address(src), send, j, rowElements, dtype, on);
                postChunks(calls, false, address(out), recv, j, rowElements, dtype, on);
            }
        }
    }

    /** One send (or receive) per piece of each chunk {@code layout} lists for {@code peer}, at its rows past {@code base}. */
    private void postChunks(NcclComm.Group calls, boolean send, long base, ChunkLayout layout, int peer, long rowElements,
                            DataType dtype, CUstream_st on) {
        int dt = NcclCodes.dataType(dtype);
        int es = dtype.getNumOfBytes();
        for (int c = 0; c < layout.sizes()[peer].length; c++) {
            long at = layout.offsets()[peer][c] * rowElements;
            ChunkPlan plan = ChunkPlan.of(layout.sizes()[peer][c] * rowElements, es, chunkBytes);
            for (int k = 0; k < plan.chunks(); k++) {
                Pointer p = pointer(base + (at + plan.offset(k)) * es);
                calls.add(send ? ncclSend(p, plan.length(k), dt, peer, comm.handle(), on)
                        : ncclRecv(p, plan.length(k), dt, peer, comm.handle(), on), send ? "ncclSend" : "ncclRecv");
            }
        }
    }

    /**
     * {@inheritDoc}
     *
     * <p>With NCCL the send completes when {@code peer} has received the data, so this returns
     * only then (or fails at the timeout); sends to this rank itself return at once.
     */
    @Override
    public void send(NDArray tensor, int peer) {
        String what = args.describeSend(tensor, peer);
        checkTensor(what, tensor);
        run(what, () -> {
            if (peer == rank()) {
                NDArray copy = tensor.duplicate();
                copy.attach(internal);
                sentToSelf.add(copy);
                return tensor;
            }
            try (NDManager temp = tensor.getManager().newSubManager(device)) {
                NDArray src = TensorMemory.contiguous(tensor, temp);
                pointToPoint(what, src, peer, true);
            }
            return tensor;
        });
    }

    @Override
    public NDArray recv(Shape shape, DataType dtype, int peer, NDManager owner) {
        String what = args.describeRecv(shape, dtype, peer);
        args.checkDtype(what, dtype);
        return run(what, () -> {
            if (peer == rank()) {
                NDArray got = sentToSelf.poll();
                if (got == null) {
                    throw new IllegalStateException(group.key() + " " + what + ": nothing was sent to this rank by itself");
                }
                if (!shape.equals(got.getShape()) || dtype != DataTypes.of(got)) {
                    CommunicationException e = args.unexpectedTensor(what, peer, DataTypes.of(got), got.getShape(), dtype, shape);
                    got.close();
                    throw e;
                }
                got.attach(owner);
                return got;
            }
            try (NDManager temp = owner.newSubManager(device)) {
                NDArray out = DataTypes.empty(temp, shape, dtype, temp.getDevice());
                pointToPoint(what, out, peer, false);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public List<byte[]> allGatherBytes(byte[] payload) {
        String what = "all-gather bytes";
        byte[] mine = payload.clone();
        return run(what, () -> {
            if (comm == null) {
                return List.of(mine);
            }
            try (NDManager temp = internal.newSubManager(device)) {
                NDArray length = temp.create(new long[] {mine.length});
                NDArray lengths = temp.create(new Shape(size()), DataType.INT64);
                gather(what, length, lengths, true);
                long[] sizes = lengths.toLongArray();
                int longest = 0;
                for (long s : sizes) {
                    longest = Math.max(longest, Math.toIntExact(s));
                }
                List<byte[]> out = new ArrayList<>(size());
                if (longest == 0) {
                    for (int i = 0; i < size(); i++) {
                        out.add(new byte[0]);
                    }
                    return out;
                }
                NDArray padded = temp.create(ByteBuffer.wrap(Arrays.copyOf(mine, longest)), new Shape(longest), DataType.UINT8);
                NDArray all = temp.create(new Shape((long) longest * size()), DataType.UINT8);
                gather(what, padded, all, true);
                byte[] bytes = all.toByteArray();
                for (int i = 0; i < size(); i++) {
                    out.add(Arrays.copyOfRange(bytes, i * longest, i * longest + (int) sizes[i]));
                }
                return out;
            }
        });
    }

    @Override
    public void barrier() {
        String what = "barrier";
        run(what, () -> {
            if (comm == null) {
                return what;
            }
            try (NDManager temp = internal.newSubManager(device)) {
                NDArray token = temp.zeros(new Shape(1), DataType.INT32);
                reduce(what, token, token, ReduceOp.SUM, true);
            }
            return what;
        });
    }

    /** Destroys the NCCL communicator and releases tensors sent to self. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        sentToSelf.clear();
        internal.close();
        if (comm != null) {
            comm.close();
        }
        if (peerCopies != null) {
            peerCopies.close();
        }
    }

    @Override
    public String toString() {
        return "NcclCommunicator[" + group + ", " + device + (comm == null ? ", local" : "") + "]";
    }

    // ---- NCCL calls: each enqueues, then hands the work to the watchdog or waits for it ----

    private void reduce(String what, NDArray src, NDArray out, ReduceOp op, boolean hostWait) {
        enqueueAllReduce(what, src, out, op, NcclComm.stream());
        finish(what, hostWait);
    }

    private void enqueueAllReduce(String what, NDArray src, NDArray out, ReduceOp op, CUstream_st on) {
        int dt = NcclCodes.dataType(DataTypes.of(src));
        int es = DataTypes.of(src).getNumOfBytes();
        long from = address(src);
        long to = address(out);
        ChunkPlan plan = ChunkPlan.of(src.size(), es, chunkBytes);
        for (int c = 0; c < plan.chunks(); c++) {
            long off = plan.offset(c) * es;
            comm.check(ncclAllReduce(pointer(from + off), pointer(to + off), plan.length(c), dt, NcclCodes.reduceOp(op),
                    comm.handle(), on), "ncclAllReduce", what);
        }
    }

    /** Rank {@code r}'s {@code src} lands at elements {@code [r n, (r + 1) n)} of {@code buffer}. */
    private void gather(String what, NDArray src, NDArray buffer, boolean hostWait) {
        enqueueAllGather(what, src, buffer, NcclComm.stream());
        finish(what, hostWait);
    }

    private void enqueueAllGather(String what, NDArray src, NDArray buffer, CUstream_st on) {
        int dt = NcclCodes.dataType(DataTypes.of(src));
        int es = DataTypes.of(src).getNumOfBytes();
        long n = src.size();
        long from = address(src);
        long to = address(buffer);
        ChunkPlan plan = ChunkPlan.of(n, es, chunkBytes);
        if (plan.chunks() == 1) {
            comm.check(ncclAllGather(pointer(from), pointer(to), n, dt, comm.handle(), on), "ncclAllGather", what);
        } else {
            for (int c = 0; c < plan.chunks(); c++) {
                long off = plan.offset(c);
                try (NcclComm.Group calls = comm.group(what)) {
                    for (int r = 0; r < size(); r++) {
                        calls.add(ncclBroadcast(pointer(from + off * es), pointer(to + (r * n + off) * es), plan.length(c), dt, r,
                                comm.handle(), on), "ncclBroadcast");
                    }
                }
            }
        }
    }

    /** This rank gets the reduction of elements {@code [rank n, (rank + 1) n)} of every member's {@code src}. */
    private void scatter(String what, NDArray src, NDArray out, ReduceOp op) {
        enqueueReduceScatter(what, src, out, op, NcclComm.stream());
        finish(what, false);
    }

    private void enqueueReduceScatter(String what, NDArray src, NDArray out, ReduceOp op, CUstream_st on) {
        int dt = NcclCodes.dataType(DataTypes.of(src));
        int redOp = NcclCodes.reduceOp(op);
        int es = DataTypes.of(src).getNumOfBytes();
        long n = out.size();
        long from = address(src);
        long to = address(out);
        ChunkPlan plan = ChunkPlan.of(n, es, chunkBytes);
        if (plan.chunks() == 1) {
            comm.check(ncclReduceScatter(pointer(from), pointer(to), n, dt, redOp, comm.handle(), on),
                    "ncclReduceScatter", what);
        } else {
            for (int c = 0; c < plan.chunks(); c++) {
                long off = plan.offset(c);
                try (NcclComm.Group calls = comm.group(what)) {
                    for (int r = 0; r < size(); r++) {
                        calls.add(ncclReduce(pointer(from + (r * n + off) * es), pointer(to + off * es), plan.length(c), dt, redOp, r,
                                comm.handle(), on), "ncclReduce");
                    }
                }
            }
        }
    }

    /** Returns at once, leaving the work to the watchdog, or waits for it on the host. */
    private void finish(String what, boolean hostWait) {
        if (hostWait) {
            comm.await(what, timeout);
        } else {
            comm.enqueued(what);
        }
    }

    /** Chunks go as separate calls, in order on the stream; the peer issues the same sequence. */
    private void pointToPoint(String what, NDArray data, int peer, boolean send) {
        int dt = NcclCodes.dataType(DataTypes.of(data));
        int es = DataTypes.of(data).getNumOfBytes();
        long at = address(data);
        ChunkPlan plan = ChunkPlan.of(data.size(), es, chunkBytes);
        for (int c = 0; c < plan.chunks(); c++) {
            long off = plan.offset(c) * es;
            if (send) {
                comm.check(ncclSend(pointer(at + off), plan.length(c), dt, peer, comm.handle(), NcclComm.stream()), "ncclSend", what);
            } else {
                comm.check(ncclRecv(pointer(at + off), plan.length(c), dt, peer, comm.handle(), NcclComm.stream()), "ncclRecv", what);
            }
        }
        // inside a CUDA graph capture the stream orders the transfer before its consumers; nothing runs to wait for
        finish(what, !CurrentStream.capturing());
    }

    // ---- checks and bookkeeping ----

    /**
     * Runs {@code body} without autograd, on this communicator's device; a {@link CommunicationException}
     * breaks the communicator.
     */
    private <T> T run(String what, Supplier<T> body) {
        return run(what, false, body);
    }

    /** {@link #run} for a body whose NCCL calls all go on the side stream ({@link NcclComm#enterForSideStream}). */
    private <T> T runOnSideStream(String what, Supplier<T> body) {
        return run(what, true, body);
    }

    private <T> T run(String what, boolean sideStreamOnly, Supplier<T> body) {
        if (closed) {
            throw new IllegalStateException(group.key() + " " + what + ": the NCCL communicator is closed");
        }
        if (broken != null) {
            throw new CommunicationException(group.key(), what, broken.ranks(),
                    "the communicator is broken by an earlier failure: " + broken.getMessage(), broken);
        }
        try {
            return withoutGrad(() -> {
                if (comm == null) {
                    return Objects.requireNonNull(body.get());
                }
                try (NcclComm.Section calls = sideStreamOnly ? comm.enterForSideStream(what) : comm.enter(what)) {
                    return Objects.requireNonNull(body.get());
                }
            });
        } catch (CommunicationException e) {
            if (broken == null) {
                broken = e;
            }
            throw e;
        }
    }

    private String describe(String op, NDArray t) {
        String what = args.describe(op, t);
        checkDevice(what, t);
        return what;
    }

    private void checkTensor(String what, NDArray t) {
        args.checkDtype(what, DataTypes.of(t));
        checkDevice(what, t);
    }

    private void checkDevice(String what, NDArray t) {
        if (comm != null && !device.equals(t.getDevice())) {
            throw new IllegalArgumentException(group.key() + " " + what + ": the tensor is on " + t.getDevice()
                    + " but this NCCL communicator works on " + device);
        }
    }
}
