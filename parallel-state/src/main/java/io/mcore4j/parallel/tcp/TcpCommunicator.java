package io.mcore4j.parallel.tcp;

import static io.mcore4j.parallel.CollectiveResults.copyOwnedBy;
import static io.mcore4j.parallel.CollectiveResults.withoutGrad;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.parallel.CollectiveArguments;
import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.RankOrderReduction;
import io.mcore4j.parallel.ReduceOp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.IntFunction;

/**
 * Collectives over TCP for one group. Every collective is one all-to-all exchange of frames over
 * the {@link PeerMesh}: each member sends every other member a header (call number, operation,
 * dtype, shape) and the bytes that member needs, then waits for the frames of all the others.
 * <ul>
 *   <li>all-reduce: everyone sends its whole tensor to everyone; each member reduces all
 *       contributions itself in rank order ({@link Reduction}), so every member (and the in-JVM
 *       backend) gets bitwise the same result. O(size x bytes) sent per member: simple, not
 *       bandwidth-optimal.</li>
 *   <li>reduce-scatter: member j gets only chunk j of everyone's tensor and reduces it in rank order.</li>
 *   <li>all-gather, all-gather-bytes: everyone sends its piece to everyone; concatenated in rank order.</li>
 *   <li>broadcast: the root sends its tensor, the others send headers only.</li>
 *   <li>all-to-all: member s sends member j only its slice j (rows counted in the header).</li>
 *   <li>barrier: headers only.</li>
 * </ul>
 * Comparing the headers detects members that called a different operation, dtype or shape (or
 * skipped a call), and every member reports the same list of what each passed. Point-to-point
 * frames use their own queue, so they never mix with collectives. Tensor bytes move as bulk
 * buffers ({@link NDArray#toByteBuffer()}, little-endian, and {@link NDManager#create(java.nio.Buffer, Shape, DataType)}).
 */
final class TcpCommunicator implements Communicator {
    private final ProcessGroup group;
    private final String channel;
    private final PeerMesh mesh;
    private final Duration timeout;
    private final long timeoutNanos;
    private final int[] peers;
    private final CollectiveArguments args;
    private final Consumer<CommunicationException> failures;
    private long sequence;
    private CommunicationException broken;

    /** @param failures told about this communicator's first failure (the backend passes it on when it closes) */
    TcpCommunicator(ProcessGroup group, String channel, PeerMesh mesh, Duration timeout,
                    Consumer<CommunicationException> failures) {
        this.group = group;
        this.failures = failures;
        this.channel = channel;
        this.mesh = mesh;
        this.timeout = timeout;
        this.timeoutNanos = timeout.toNanos();
        this.peers = new int[group.size()];
        for (int i = 0; i < peers.length; i++) {
            peers[i] = i == group.rank() ? -1 : group.globalRank(i);
        }
        this.args = new CollectiveArguments(group, "TCP", Frame.DTYPES);
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
        String what = args.describe("all-reduce " + op, input);
        byte[] bytes = bytesOf(input);
        Frame[] got = exchange(what, j -> tensorFrame(what, input, bytes));
        return withoutGrad(() -> {
            try (NDManager temp = owner.newSubManager(input.getDevice())) {
                return RankOrderReduction.reduce(contributions(got, input, temp), op, owner);
            }
        });
    }

    @Override
    public void allReduceInPlace(NDArray tensor, ReduceOp op) {
        try (NDManager temp = tensor.getManager().newSubManager()) {
            NDArray result = allReduce(tensor, op, temp);
            Tensors.copyInto(tensor, result);
        }
    }

    @Override
    public NDArray allGather(NDArray input, int dim, NDManager owner) {
        int d = args.checkDim(input, dim);
        String what = args.describe("all-gather dim " + d, input);
        byte[] bytes = bytesOf(input);
        Frame[] got = exchange(what, j -> tensorFrame(what, input, bytes));
        return withoutGrad(() -> {
            try (NDManager temp = owner.newSubManager(input.getDevice())) {
                NDArray out = NDArrays.concat(new NDList(contributions(got, input, temp)), d);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public NDArray reduceScatter(NDArray input, int dim, ReduceOp op, NDManager owner) {
        int d = args.checkScatterDim(input, dim);
        String what = args.describe("reduce-scatter " + op + " dim " + d, input);
        return withoutGrad(() -> {
            try (NDManager temp = owner.newSubManager(input.getDevice())) {
                NDArray[] chunks = new NDArray[size()];
                for (int j = 0; j < size(); j++) {
                    chunks[j] = Tensors.chunk(input, d, size(), j);
                    chunks[j].attach(temp);
                }
                Frame[] got = exchange(what, j -> tensorFrame(what, chunks[j], bytesOf(chunks[j])));
                return RankOrderReduction.reduce(contributions(got, chunks[rank()], temp), op, owner);
            }
        });
    }

    @Override
    public NDArray broadcast(NDArray input, int root, NDManager owner) {
        args.checkPeer(root, "broadcast root");
        String what = args.describe("broadcast from " + root, input);
        boolean isRoot = rank() == root;
        byte[] bytes = isRoot ? bytesOf(input) : Frame.empty();
        Frame[] got = exchange(what, j -> new Frame(Frame.COLLECTIVE, channel, sequence, what, DataTypes.of(input),
                input.getShape(), 0, bytes));
        return withoutGrad(() -> {
            if (isRoot) {
                return copyOwnedBy(input, owner);
            }
            return tensorOf(got[root], input.getShape(), DataTypes.of(input), owner);
        });
    }

    @Override
    public NDArray allToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        args.checkSplits(input, sendSplits, recvSplits);
        String what = CollectiveArguments.describeAllToAll(input);
        args.checkDtype(what, DataTypes.of(input));
        Shape rest = input.getShape().slice(1);
        return withoutGrad(() -> {
            try (NDManager temp = owner.newSubManager(input.getDevice())) {
                NDArray[] slices = new NDArray[size()];
                long offset = 0;
                for (int j = 0; j < size(); j++) {
                    slices[j] = input.get(offset + ":" + (offset + sendSplits[j]));
                    slices[j].attach(temp);
                    offset += sendSplits[j];
                }
                Frame[] got = exchange(what, j -> new Frame(Frame.COLLECTIVE, channel, sequence, what, DataTypes.of(input),
                        slices[j].getShape(), sendSplits[j], bytesOf(slices[j])));
                NDList pieces = new NDList();
                for (int s = 0; s < size(); s++) {
                    long len = s == rank() ? sendSplits[s] : got[s].count();
                    if (len != recvSplits[s]) {
                        throw fail(args.unexpectedRows(what, s, len, recvSplits[s]));
                    }
                    if (len > 0) {
                        pieces.add(s == rank() ? slices[s] : tensorOf(got[s], new Shape(len).addAll(rest), DataTypes.of(input), temp));
                    }
                }
                NDArray out = pieces.isEmpty()
                        ? DataTypes.zeros(owner, new Shape(0).addAll(rest), DataTypes.of(input), owner.getDevice())
                        : NDArrays.concat(pieces, 0);
                out.attach(owner);
                return out;
            }
        });
    }

    @Override
    public void send(NDArray tensor, int peer) {
        String what = args.describeSend(tensor, peer);
        args.checkDtype(what, DataTypes.of(tensor));
        checkUsable(what);
        Frame f = new Frame(Frame.POINT_TO_POINT, channel, 0, what, DataTypes.of(tensor), tensor.getShape(), 0, bytesOf(tensor));
        try {
            mesh.send(group.globalRank(peer), f, group.key(), what);
        } catch (CommunicationException e) {
            throw fail(e);
        }
    }

    @Override
    public NDArray recv(Shape shape, DataType dtype, int peer, NDManager owner) {
        String what = args.describeRecv(shape, dtype, peer);
        checkUsable(what);
        int[] from = new int[size()];
        Arrays.fill(from, -1);
        from[peer] = group.globalRank(peer);
        Frame got;
        try {
            got = mesh.take(channel, Frame.POINT_TO_POINT, from, System.nanoTime() + timeoutNanos,
                    timeout.toMillis(), group.key(), what)[peer];
        } catch (CommunicationException e) {
            throw fail(e);
        }
        if (!shape.equals(got.shape()) || dtype != got.dtype()) {
            throw fail(args.unexpectedTensor(what, peer, got.dtype(), got.shape(), dtype, shape));
        }
        return tensorOf(got, shape, dtype, owner);
    }

    @Override
    public List<byte[]> allGatherBytes(byte[] payload) {
        byte[] mine = payload.clone();
        Frame[] got = exchange("all-gather bytes", j -> new Frame(Frame.COLLECTIVE, channel, sequence, "all-gather bytes",
                null, null, 0, mine));
        List<byte[]> out = new ArrayList<>(size());
        for (int i = 0; i < size(); i++) {
            out.add(i == rank() ? mine.clone() : got[i].payload());
        }
        return out;
    }

    @Override
    public void barrier() {
        exchange("barrier", j -> new Frame(Frame.COLLECTIVE, channel, sequence, "barrier", null, null, 0, Frame.empty()));
    }

    /**
     * Sends {@code outgoing.apply(j)} to every other member j, then takes one frame from each and
     * checks that all describe the same call.
     *
     * @return the received frames by group index (null at this rank's index)
     */
    private Frame[] exchange(String what, IntFunction<Frame> outgoing) {
        checkUsable(what);
        sequence++;
        try {
            for (int j = 0; j < size(); j++) {
                if (j != rank()) {
                    // a gone peer is reported by the take below, after the live ones got their frames
                    mesh.offer(peers[j], outgoing.apply(j));
                }
            }
            Frame[] got = mesh.take(channel, Frame.COLLECTIVE, peers, System.nanoTime() + timeoutNanos,
                    timeout.toMillis(), group.key(), what);
            checkSameCall(what, got);
            return got;
        } catch (CommunicationException e) {
            throw fail(e);
        }
    }

    private void checkSameCall(String what, Frame[] got) {
        boolean same = true;
        for (int j = 0; j < size(); j++) {
            if (j != rank() && (!what.equals(got[j].operation()) || got[j].sequence() != sequence)) {
                same = false;
            }
        }
        if (same) {
            return;
        }
        String first = rank() == 0 ? what : got[0].operation();
        long firstCall = rank() == 0 ? sequence : got[0].sequence();
        StringBuilder b = new StringBuilder("members called different operations:");
        List<Integer> differing = new ArrayList<>();
        for (int j = 0; j < size(); j++) {
            String op = j == rank() ? what : got[j].operation();
            long call = j == rank() ? sequence : got[j].sequence();
            b.append(" rank ").append(group.globalRank(j)).append(": ").append(op).append(" (call ").append(call).append(");");
            if (!op.equals(first) || call != firstCall) {
                differing.add(group.globalRank(j));
            }
        }
        throw new CommunicationException(group.key(), what, differing, b.toString(), null);
    }

    private Frame tensorFrame(String what, NDArray t, byte[] bytes) {
        return new Frame(Frame.COLLECTIVE, channel, sequence, what, DataTypes.of(t), t.getShape(), 0, bytes);
    }

    /** Every member's contribution in rank order: this rank's own tensor, the others decoded into {@code temp}. */
    private NDArray[] contributions(Frame[] got, NDArray mine, NDManager temp) {
        NDArray[] all = new NDArray[size()];
        for (int i = 0; i < size(); i++) {
            all[i] = i == rank() ? mine : tensorOf(got[i], mine.getShape(), DataTypes.of(mine), temp);
        }
        return all;
    }

    private static byte[] bytesOf(NDArray t) {
        if (DataTypes.of(t) == DataType.BFLOAT16) {
            return DataTypes.toBytes(t);
        }
        ByteBuffer b = t.toByteBuffer();
        if (b.order() != ByteOrder.LITTLE_ENDIAN) {
            throw new UnsupportedOperationException("tensor bytes are " + b.order() + "; the TCP backend sends little-endian");
        }
        if (b.hasArray() && b.arrayOffset() == 0 && b.position() == 0 && b.remaining() == b.array().length) {
            return b.array();
        }
        byte[] copy = new byte[b.remaining()];
        b.duplicate().get(copy);
        return copy;
    }

    private static NDArray tensorOf(Frame f, Shape shape, DataType dtype, NDManager owner) {
        if (dtype == DataType.BFLOAT16) {
            return DataTypes.fromBytes(owner, ByteBuffer.wrap(f.payload()), shape, dtype, owner.getDevice());
        }
        return owner.create(ByteBuffer.wrap(f.payload()).order(ByteOrder.LITTLE_ENDIAN), shape, dtype);
    }

    private CommunicationException fail(CommunicationException e) {
        if (broken == null) {
            broken = e;
            failures.accept(e);
        }
        return e;
    }

    private void checkUsable(String what) {
        if (broken != null) {
            throw new CommunicationException(group.key(), what, broken.ranks(),
                    "the communicator is broken by an earlier failure: " + broken.getMessage(), broken);
        }
    }
}
