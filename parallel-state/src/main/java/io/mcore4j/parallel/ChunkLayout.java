package io.mcore4j.parallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.TensorMemory;
import io.mcore4j.core.Tensors;

import java.util.Arrays;
import java.util.Comparator;
import java.util.stream.IntStream;

/**
 * One side of {@link Communicator#allToAllChunks}: the rows of a tensor cut into chunks per peer of a group, chunk
 * {@code c} of peer {@code j} being {@code sizes[j][c]} rows from row {@code offsets[j][c]}. The chunks of all peers
 * tile the rows {@code [0, rows)} exactly, in any order: the order in which they travel (peer by peer, each peer's
 * chunks in turn) need not be the order in which they lie.
 *
 * @param sizes rows of each chunk, per peer (a peer may have no chunk, a chunk no row)
 * @param offsets first row of each chunk, same shape as {@code sizes}
 * @param rows the tensor's rows
 */
public record ChunkLayout(long[][] sizes, long[][] offsets, long rows) {

    /**
     * Validates the layout.
     *
     * @throws IllegalArgumentException naming the chunk where the shapes differ, a size or offset is negative, or the
     *     chunks do not tile {@code [0, rows)}
     */
    public ChunkLayout {
        sizes = copy(sizes);
        offsets = copy(offsets);
        if (sizes.length != offsets.length) {
            throw new IllegalArgumentException("chunk layout: sizes for " + sizes.length + " peers, offsets for "
                    + offsets.length);
        }
        int chunks = 0;
        for (int j = 0; j < sizes.length; j++) {
            if (sizes[j].length != offsets[j].length) {
                throw new IllegalArgumentException("chunk layout: peer " + j + " has " + sizes[j].length
                        + " chunk sizes and " + offsets[j].length + " offsets");
            }
            for (int c = 0; c < sizes[j].length; c++) {
                if (sizes[j][c] < 0 || offsets[j][c] < 0) {
                    throw new IllegalArgumentException("chunk layout: peer " + j + " chunk " + c + " has size "
                            + sizes[j][c] + " at offset " + offsets[j][c] + " (both must be >= 0)");
                }
            }
            chunks += sizes[j].length;
        }
        long[][] spans = new long[chunks][];
        int k = 0;
        for (int j = 0; j < sizes.length; j++) {
            for (int c = 0; c < sizes[j].length; c++) {
                spans[k++] = new long[] {offsets[j][c], sizes[j][c], j, c};
            }
        }
        Arrays.sort(spans, Comparator.comparingLong((long[] s) -> s[0]).thenComparingLong(s -> s[1]));
        long next = 0;
        for (long[] s : spans) {
            if (s[1] == 0) {
                continue;
            }
            if (s[0] != next) {
                throw new IllegalArgumentException("chunk layout: peer " + s[2] + " chunk " + s[3] + " starts at row "
                        + s[0] + " where row " + next + " was expected: the chunks must tile rows [0, " + rows + ")");
            }
            next += s[1];
        }
        if (next != rows) {
            throw new IllegalArgumentException("chunk layout: the chunks cover rows [0, " + next + ") of " + rows);
        }
    }

    /**
     * Chunks lying in the order they travel: peer 0's in turn, then peer 1's, ...
     *
     * @param sizes rows of each chunk, per peer
     * @return the layout
     * @throws IllegalArgumentException if a size is negative
     */
    public static ChunkLayout consecutive(long[][] sizes) {
        long[][] offsets = new long[sizes.length][];
        long at = 0;
        for (int j = 0; j < sizes.length; j++) {
            offsets[j] = new long[sizes[j].length];
            for (int c = 0; c < sizes[j].length; c++) {
                offsets[j][c] = at;
                at += sizes[j][c];
            }
        }
        return new ChunkLayout(sizes, offsets, at);
    }

    /**
     * Checks the arguments of {@link Communicator#allToAllChunks}.
     *
     * @param group the exchange's group
     * @param input the rows sent
     * @param send where they lie, per peer
     * @param recv where the received rows go, per peer
     * @throws IllegalArgumentException if a layout does not have a peer per rank or {@code send} not the input's rows
     */
    public static void checkExchange(ProcessGroup group, NDArray input, ChunkLayout send, ChunkLayout recv) {
        if (send.peers() != group.size() || recv.peers() != group.size() || input.getShape().dimension() == 0
                || input.getShape().get(0) != send.rows()) {
            throw new IllegalArgumentException(group.key() + " all-to-all of chunks: layouts for " + send.peers()
                    + " and " + recv.peers() + " peers in a group of " + group.size() + ", sending " + send.rows()
                    + " rows of an input of shape " + input.getShape());
        }
    }

    /**
     * Checks the target of {@link Communicator#startAllToAllChunks}: {@code recv.rows()} rows shaped as the input's,
     * of its dtype, contiguous.
     *
     * @param group the exchange's group
     * @param input the rows sent
     * @param recv where the received rows go, per peer
     * @param output the tensor they go into
     * @throws IllegalArgumentException if {@code output} is not that tensor
     */
    public static void checkTarget(ProcessGroup group, NDArray input, ChunkLayout recv, NDArray output) {
        Shape expected = new Shape(recv.rows()).addAll(input.getShape().slice(1));
        if (!output.getShape().equals(expected) || DataTypes.of(output) != DataTypes.of(input)
                || !TensorMemory.isContiguous(output)) {
            throw new IllegalArgumentException(group.key() + " all-to-all of chunks into a tensor: the output is "
                    + DataTypes.of(output) + " " + output.getShape() + (TensorMemory.isContiguous(output) ? "" : ", not contiguous")
                    + "; the received rows are " + DataTypes.of(input) + " " + expected + ", contiguous");
        }
    }

    /** @return the number of peers */
    public int peers() {
        return sizes.length;
    }

    /** @return rows per peer: the sum of its chunks */
    public long[] rowsPerPeer() {
        long[] out = new long[sizes.length];
        for (int j = 0; j < sizes.length; j++) {
            out[j] = Arrays.stream(sizes[j]).sum();
        }
        return out;
    }

    /** @return whether the chunks lie in the order they travel (what {@link #consecutive} makes) */
    public boolean isConsecutive() {
        long at = 0;
        for (int j = 0; j < sizes.length; j++) {
            for (int c = 0; c < sizes[j].length; c++) {
                if (sizes[j][c] > 0 && offsets[j][c] != at) {
                    return false;
                }
                at += sizes[j][c];
            }
        }
        return true;
    }

    /**
     * The chunks of {@code tensor} (laid out as this layout says) in the order they travel.
     *
     * @param tensor {@code rows} rows
     * @param owner owns the result
     * @return the chunks concatenated peer by peer; {@code tensor} itself where they already lie so
     */
    public NDArray gather(NDArray tensor, NDManager owner) {
        if (isConsecutive()) {
            return tensor;
        }
        NDList parts = new NDList();
        for (int j = 0; j < sizes.length; j++) {
            for (int c = 0; c < sizes[j].length; c++) {
                if (sizes[j][c] > 0) {
                    parts.add(Tensors.own(Tensors.narrow(tensor, 0, offsets[j][c], offsets[j][c] + sizes[j][c]), owner));
                }
            }
        }
        return Tensors.own(NDArrays.concat(parts, 0), owner);
    }

    /**
     * The inverse of {@link #gather}: chunks that arrive in travel order, placed where this layout says.
     *
     * @param travelled the chunks concatenated peer by peer, {@code rows} rows
     * @param owner owns the result
     * @return the placed rows; {@code travelled} itself where they already lie so
     */
    public NDArray place(NDArray travelled, NDManager owner) {
        if (isConsecutive()) {
            return travelled;
        }
        int chunks = Arrays.stream(sizes).mapToInt(s -> s.length).sum();
        long[] flatSizes = new long[chunks];
        long[] flatOffsets = new long[chunks];
        int k = 0;
        for (int j = 0; j < sizes.length; j++) {
            for (int c = 0; c < sizes[j].length; c++, k++) {
                flatSizes[k] = sizes[j][c];
                flatOffsets[k] = offsets[j][c];
            }
        }
        NDList parts = Tensors.split(travelled, flatSizes, 0);
        parts.attach(owner);
        NDList placed = new NDList();
        IntStream.range(0, chunks).filter(i -> flatSizes[i] > 0).boxed()
                .sorted(Comparator.comparingLong(i -> flatOffsets[i])).forEach(i -> placed.add(parts.get(i)));
        return placed.size() == 1 ? placed.get(0) : Tensors.own(NDArrays.concat(placed, 0), owner);
    }

    private static long[][] copy(long[][] a) {
        long[][] out = new long[a.length][];
        for (int i = 0; i < a.length; i++) {
            out[i] = a[i].clone();
        }
        return out;
    }

    @Override
    public String toString() {
        return "ChunkLayout{sizes " + Arrays.deepToString(sizes) + ", offsets " + Arrays.deepToString(offsets) + ", rows "
                + rows + "}";
    }
}
