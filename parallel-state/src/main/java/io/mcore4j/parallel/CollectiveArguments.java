package io.mcore4j.parallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * The argument checks and operation descriptions every {@link Communicator} backend applies before
 * it communicates, so that all backends reject the same calls with the same messages.
 *
 * <p>One instance serves one communicator: it knows the group (whose key starts every message) and
 * the dtypes the backend can move. Checks throw {@link IllegalArgumentException} naming the group,
 * the operation and the offending values; they run before anything is sent, so a rejected call
 * leaves the communicator usable. Descriptions are the operation strings that appear in
 * {@link CommunicationException}s and that the TCP backend compares across members, e.g.
 * {@code all-reduce SUM float32 (2, 1)} or {@code all-to-all float32 [*, 3]}. Instances are
 * immutable; methods that build a {@link CommunicationException} only return it.
 */
public final class CollectiveArguments {
    private final ProcessGroup group;
    private final String backend;
    private final List<DataType> dtypes;

    /**
     * @param group the group of the communicator
     * @param backend the backend's name for messages, e.g. {@code TCP}
     * @param dtypes the dtypes the backend can move
     */
    public CollectiveArguments(ProcessGroup group, String backend, List<DataType> dtypes) {
        this.group = Objects.requireNonNull(group, "group");
        this.backend = Objects.requireNonNull(backend, "backend");
        this.dtypes = List.copyOf(dtypes);
    }

    /** @return the dtypes the backend can move */
    public List<DataType> dtypes() {
        return dtypes;
    }

    /**
     * Checks the dtype of {@code t} and describes the call.
     *
     * @param op the operation, e.g. {@code all-reduce SUM} or {@code broadcast from 0}
     * @param t this rank's tensor
     * @return {@code op}, dtype and shape, e.g. {@code all-reduce SUM float32 (2, 1)}
     * @throws IllegalArgumentException if the backend cannot move the dtype
     */
    public String describe(String op, NDArray t) {
        DataType dtype = DataTypes.of(t);
        String what = op + " " + dtype + " " + t.getShape();
        checkDtype(what, dtype);
        return what;
    }

    /**
     * @param what the operation, as described
     * @param dtype a dtype to move
     * @throws IllegalArgumentException naming the operation and the supported dtypes if the backend
     *         cannot move {@code dtype}
     */
    public void checkDtype(String what, DataType dtype) {
        if (!dtypes.contains(dtype)) {
            throw new IllegalArgumentException(group.key() + " " + what + ": dtype " + dtype + " is not supported by the "
                    + backend + " backend; use one of " + dtypes);
        }
    }

    /**
     * @param t a tensor
     * @param dim a dim of {@code t}, negative counting from the last
     * @return the dim as a non-negative index
     * @throws IllegalArgumentException if {@code t} has no such dim
     */
    public int checkDim(NDArray t, int dim) {
        int n = t.getShape().dimension();
        int d = dim < 0 ? dim + n : dim;
        if (d < 0 || d >= n) {
            throw new IllegalArgumentException(group.key() + ": dim " + dim + " is out of range for shape " + t.getShape());
        }
        return d;
    }

    /**
     * The dim a reduce-scatter splits into one equal chunk per member.
     *
     * @param t this rank's contribution
     * @param dim a dim of {@code t}, negative counting from the last
     * @return the dim as a non-negative index
     * @throws IllegalArgumentException if {@code t} has no such dim or its size is not divisible by the group size
     */
    public int checkScatterDim(NDArray t, int dim) {
        int d = checkDim(t, dim);
        if (t.getShape().get(d) % group.size() != 0) {
            throw new IllegalArgumentException(group.key() + " reduce-scatter: dim " + d + " of shape " + t.getShape()
                    + " is not divisible by the group size " + group.size());
        }
        return d;
    }

    /**
     * @param peer a group index passed as {@code role}
     * @param role what the index is, e.g. {@code broadcast root}
     * @throws IllegalArgumentException if {@code peer} is not a member's index
     */
    public void checkPeer(int peer, String role) {
        if (peer < 0 || peer >= group.size()) {
            throw new IllegalArgumentException(group.key() + ": " + role + " " + peer + " is outside [0, " + group.size() + ")");
        }
    }

    /**
     * Checks the splits of an all-to-all: one per member, none negative, the send splits summing to
     * the input's rows. (Whether the receive splits match what the others send is known only after
     * the exchange; see {@link #unexpectedRows}.)
     *
     * @param input this rank's rows along dim 0
     * @param sendSplits rows sent to each member
     * @param recvSplits rows expected from each member
     * @return the rows this rank receives in all, {@code sum(recvSplits)}
     * @throws IllegalArgumentException naming the splits if they are invalid, or if the input is a scalar
     */
    public long checkSplits(NDArray input, long[] sendSplits, long[] recvSplits) {
        if (sendSplits.length != group.size() || recvSplits.length != group.size()) {
            throw new IllegalArgumentException(group.key() + " all-to-all: " + sendSplits.length + " send and "
                    + recvSplits.length + " receive splits for a group of " + group.size());
        }
        if (input.getShape().dimension() == 0) {
            throw new IllegalArgumentException(group.key() + " all-to-all: the input needs at least one dim, got a scalar");
        }
        long sent = 0;
        long received = 0;
        for (int j = 0; j < group.size(); j++) {
            if (sendSplits[j] < 0 || recvSplits[j] < 0) {
                throw new IllegalArgumentException(group.key() + " all-to-all: negative split in " + Arrays.toString(sendSplits)
                        + " / " + Arrays.toString(recvSplits));
            }
            sent += sendSplits[j];
            received += recvSplits[j];
        }
        long rows = input.getShape().get(0);
        if (sent != rows) {
            throw new IllegalArgumentException(group.key() + " all-to-all: send splits " + Arrays.toString(sendSplits)
                    + " sum to " + sent + " but the input has " + rows + " rows");
        }
        return received;
    }

    /**
     * Describes an all-to-all. The row count stays out (members send different numbers of rows), so
     * every member describes the same call alike.
     *
     * @param input this rank's rows along dim 0 (not a scalar)
     * @return e.g. {@code all-to-all float32 [*, 3]}
     */
    public static String describeAllToAll(NDArray input) {
        long[] rest = input.getShape().slice(1).getShape();
        StringBuilder b = new StringBuilder("all-to-all ").append(DataTypes.of(input)).append(" [*");
        for (long d : rest) {
            b.append(", ").append(d);
        }
        return b.append(']').toString();
    }

    /**
     * Checks the destination of a send and describes it.
     *
     * @param t the tensor sent
     * @param peer group index of the receiver
     * @return e.g. {@code send float32 (2, 3) to rank 5} (the receiver's global rank)
     * @throws IllegalArgumentException if {@code peer} is not a member's index
     */
    public String describeSend(NDArray t, int peer) {
        checkPeer(peer, "send destination");
        return "send " + DataTypes.of(t) + " " + t.getShape() + " to rank " + group.globalRank(peer);
    }

    /**
     * Checks the source of a receive and describes it.
     *
     * @param shape the expected shape
     * @param dtype the expected dtype
     * @param peer group index of the sender
     * @return e.g. {@code recv float32 (2, 3) from rank 4} (the sender's global rank)
     * @throws IllegalArgumentException if {@code peer} is not a member's index
     */
    public String describeRecv(Shape shape, DataType dtype, int peer) {
        checkPeer(peer, "receive source");
        return "recv " + dtype + " " + shape + " from rank " + group.globalRank(peer);
    }

    /**
     * The failure of a receive that got something other than it expected.
     *
     * @param what the receive, as described
     * @param peer group index of the sender
     * @param sentDtype what the sender sent
     * @param sentShape what the sender sent
     * @param dtype what was expected
     * @param shape what was expected
     * @return the exception to throw, naming the sender
     */
    public CommunicationException unexpectedTensor(String what, int peer, DataType sentDtype, Shape sentShape,
                                                   DataType dtype, Shape shape) {
        return new CommunicationException(group.key(), what, List.of(group.globalRank(peer)), "rank " + group.globalRank(peer)
                + " sent " + sentDtype + " " + sentShape + " but " + dtype + " " + shape + " was expected", null);
    }

    /**
     * The failure of an all-to-all in which a member sends this rank another number of rows than
     * this rank's receive split says.
     *
     * @param what the all-to-all, as described
     * @param sender group index of the sender
     * @param rows the rows it sends here
     * @param expected {@code recvSplits[sender]}
     * @return the exception to throw, naming the sender
     */
    public CommunicationException unexpectedRows(String what, int sender, long rows, long expected) {
        int from = group.globalRank(sender);
        String message = sender == group.rank()
                ? "rank " + from + " sends " + rows + " rows to itself but expects " + expected
                : "rank " + from + " sends " + rows + " rows to rank " + group.globalRank(group.rank()) + ", which expects " + expected;
        return new CommunicationException(group.key(), what, List.of(from), message, null);
    }
}
