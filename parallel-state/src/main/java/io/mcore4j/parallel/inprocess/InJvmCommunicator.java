package io.mcore4j.parallel.inprocess;

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

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * In-JVM collectives: members exchange references to their input tensors through a
 * {@link Rendezvous}, each computes its own result from all inputs (sums in rank order, so results
 * are bitwise identical on every member), then a second rendezvous releases the inputs. Sends are
 * buffered copies, so a send never blocks.
 */
final class InJvmCommunicator implements Communicator {
    private static final List<DataType> SUPPORTED =
            List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16, DataType.FLOAT64, DataType.INT32, DataType.INT64);

    private final InJvmFabric fabric;
    private final ProcessGroup group;
    private final Rendezvous rendezvous;
    private final long timeoutNanos;
    private final CollectiveArguments args;

    InJvmCommunicator(InJvmFabric fabric, ProcessGroup group) {
        this.fabric = fabric;
        this.group = group;
        this.rendezvous = fabric.rendezvous(group);
        this.timeoutNanos = fabric.timeout().toNanos();
        this.args = new CollectiveArguments(group, "in-JVM", SUPPORTED);
    }

    @Override
    public ProcessGroup group() {
        return group;
    }

    @Override
    public Duration timeout() {
        return fabric.timeout();
    }

    @Override
    public NDArray allReduce(NDArray input, ReduceOp op, NDManager owner) {
        String what = args.describe("all-reduce " + op, input);
        return collective(what, input, all -> RankOrderReduction.reduce(all, op, owner));
    }

    @Override
    public void allReduceInPlace(NDArray tensor, ReduceOp op) {
        String what = args.describe("all-reduce " + op, tensor);
        try (NDManager temp = tensor.getManager().newSubManager()) {
            NDArray result = collective(what, tensor, all -> RankOrderReduction.reduce(all, op, temp));
            Tensors.copyInto(tensor, result);
        }
    }

    @Override
    public NDArray allGather(NDArray input, int dim, NDManager owner) {
        int d = args.checkDim(input, dim);
        String what = args.describe("all-gather dim " + d, input);
        return collective(what, input, all -> {
            NDArray out = NDArrays.concat(new NDList(all), d);
            out.attach(owner);
            return out;
        });
    }

    @Override
    public NDArray reduceScatter(NDArray input, int dim, ReduceOp op, NDManager owner) {
        int d = args.checkScatterDim(input, dim);
        String what = args.describe("reduce-scatter " + op + " dim " + d, input);
        return collective(what, input, all -> {
            try (NDManager temp = owner.newSubManager()) {
                NDArray[] chunks = new NDArray[all.length];
                for (int i = 0; i < all.length; i++) {
                    chunks[i] = Tensors.chunk(all[i], d, size(), rank());
                    chunks[i].attach(temp);
                }
                return RankOrderReduction.reduce(chunks, op, owner);
            }
        });
    }

    @Override
    public NDArray broadcast(NDArray input, int root, NDManager owner) {
        args.checkPeer(root, "broadcast root");
        String what = args.describe("broadcast from " + root, input);
        return collective(what, input, all -> copyOwnedBy(all[root], owner));
    }

    @Override
    public NDArray allToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        args.checkSplits(input, sendSplits, recvSplits);
        String what = CollectiveArguments.describeAllToAll(input);
        Object[] posted = exchange(what, new Object[] {input, sendSplits.clone()});
        try {
            return withoutGrad(() -> {
                try (NDManager temp = owner.newSubManager()) {
                    NDList pieces = new NDList();
                    for (int s = 0; s < size(); s++) {
                        Object[] p = (Object[]) posted[s];
                        long[] theirSplits = (long[]) p[1];
                        long offset = 0;
                        for (int k = 0; k < rank(); k++) {
                            offset += theirSplits[k];
                        }
                        long len = theirSplits[rank()];
                        if (len != recvSplits[s]) {
                            throw args.unexpectedRows(what, s, len, recvSplits[s]);
                        }
                        NDArray piece = ((NDArray) p[0]).get(offset + ":" + (offset + len));
                        piece.attach(temp);
                        pieces.add(piece);
                    }
                    NDArray out = NDArrays.concat(pieces, 0);
                    out.attach(owner);
                    return out;
                }
            });
        } finally {
            exchange("release " + what, null);
        }
    }

    @Override
    public void send(NDArray tensor, int peer) {
        checkAlive(args.describeSend(tensor, peer));
        NDArray copy = withoutGrad(tensor::duplicate);
        copy.detach();
        fabric.mailbox(group, group.globalRank(rank()), group.globalRank(peer)).add(copy);
    }

    @Override
    public NDArray recv(Shape shape, DataType dtype, int peer, NDManager owner) {
        String what = args.describeRecv(shape, dtype, peer);
        LinkedBlockingQueue<NDArray> box = fabric.mailbox(group, group.globalRank(peer), group.globalRank(rank()));
        long deadline = System.nanoTime() + timeoutNanos;
        NDArray got = null;
        try {
            while (got == null) {
                checkAlive(what);
                long remaining = deadline - System.nanoTime();
                if (remaining <= 0) {
                    CommunicationException e = new CommunicationException(group.key(), what, List.of(group.globalRank(peer)),
                            "timed out after " + timeoutNanos / 1_000_000 + " ms waiting for rank " + group.globalRank(peer), null);
                    rendezvous.abort(e);
                    throw e;
                }
                got = box.poll(Math.min(remaining, 50_000_000L), TimeUnit.NANOSECONDS);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CommunicationException(group.key(), what, List.of(), "interrupted", e);
        }
        DataType gotType = DataTypes.of(got);
        if (!got.getShape().equals(shape) || gotType != dtype) {
            CommunicationException e = args.unexpectedTensor(what, peer, gotType, got.getShape(), dtype, shape);
            got.close();
            throw e;
        }
        got.attach(owner);
        return got;
    }

    @Override
    public List<byte[]> allGatherBytes(byte[] payload) {
        Object[] all = exchange("all-gather bytes", payload.clone());
        List<byte[]> out = new ArrayList<>(all.length);
        for (Object o : all) {
            out.add(((byte[]) o).clone());
        }
        return out;
    }

    @Override
    public void barrier() {
        exchange("barrier", null);
    }

    /** Posts {@code input}, computes the result from all inputs, then waits until everyone has read them. */
    private NDArray collective(String what, NDArray input, java.util.function.Function<NDArray[], NDArray> compute) {
        Object[] posted = exchange(what, input);
        NDArray[] all = Arrays.copyOf(posted, posted.length, NDArray[].class);
        try {
            return withoutGrad(() -> compute.apply(all));
        } finally {
            exchange("release " + what, null);
        }
    }

    private Object[] exchange(String what, Object payload) {
        checkAlive(what);
        return rendezvous.exchange(rank(), what, payload, timeoutNanos);
    }

    private void checkAlive(String what) {
        CommunicationException aborted = fabric.aborted();
        if (aborted != null) {
            throw new CommunicationException(group.key(), what, aborted.ranks(),
                    "the world was aborted: " + aborted.getMessage(), aborted);
        }
    }
}
