package io.mcore4j.parallel;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.Tensors;

import java.time.Duration;
import java.util.List;

/**
 * Collective and point-to-point communication over one {@link ProcessGroup}: the SPI every backend
 * (in-JVM threads, TCP processes, NCCL) implements.
 *
 * <p>Contract, for every backend:
 * <ul>
 *   <li>Every member calls the same collectives in the same order with matching arguments; a
 *       mismatch (operation, dtype, shape) is detected where the backend can and reported as a
 *       {@link CommunicationException} naming the ranks and what each passed.</li>
 *   <li>Supported dtypes: float32, float16, int32, int64 (float64 where the backend can). Inputs
 *       are read, never modified, except by the {@code InPlace} methods.</li>
 *   <li>Results are new tensors owned by the {@code owner} manager, on the input's device. Sums are
 *       accumulated in rank order, so every member gets bitwise identical results.</li>
 *   <li>Every blocking call gives up after {@link #timeout()} with a {@link CommunicationException}
 *       naming the group, the operation and the ranks that did not arrive; after any failure the
 *       communicator is broken and every later call fails at once. A GPU backend may return from a
 *       collective once its work is queued on the device (results are then complete in stream
 *       order); a failure of such work surfaces, naming it, at a later call.</li>
 *   <li>Ranks in arguments ({@code root}, {@code peer}) are indices within the group, not global
 *       ranks. A communicator is used by one thread at a time.</li>
 * </ul>
 */
public interface Communicator {

    /** @return the group this communicator serves */
    ProcessGroup group();

    /** @return this process's index in the group */
    default int rank() {
        return group().rank();
    }

    /** @return the group size */
    default int size() {
        return group().size();
    }

    /** @return how long a blocking call waits for peers before failing */
    Duration timeout();

    /**
     * Sets up, before a CUDA graph capture, what the capture's collectives of this group need and a capture cannot do
     * itself (device memory, a handshake through the group): every member calls it at the same point, as it would a
     * collective. The default does nothing.
     */
    default void prepareCapture() {
    }

    /**
     * Reduces {@code input} across the group.
     *
     * @param input this rank's contribution
     * @param op the reduction
     * @param owner manager that owns the result
     * @return the reduced tensor, identical on every rank
     */
    NDArray allReduce(NDArray input, ReduceOp op, NDManager owner);

    /**
     * Reduces {@code tensor} across the group, writing the result into it.
     *
     * @param tensor this rank's contribution, overwritten with the result
     * @param op the reduction
     */
    void allReduceInPlace(NDArray tensor, ReduceOp op);

    /**
     * Starts {@link #allReduceInPlace}, letting it overlap the caller's later work where the backend
     * can (NCCL: on a second CUDA stream, after the caller's work enqueued so far). The default runs
     * the all-reduce at once. See {@link PendingCollective} for what the caller may do meanwhile.
     *
     * @param tensor this rank's contribution, contiguous, overwritten with the result; keep it open
     *               and unmodified until {@link PendingCollective#await()}
     * @param op the reduction
     * @return the pending collective; its {@code await()} returns {@code tensor}
     */
    default PendingCollective startAllReduceInPlace(NDArray tensor, ReduceOp op) {
        allReduceInPlace(tensor, op);
        return () -> tensor;
    }

    /**
     * Starts {@link #reduceScatter} along dim 0, letting it overlap the caller's later work where
     * the backend can (see {@link #startAllReduceInPlace}). The default runs it at once.
     *
     * @param input this rank's contribution, contiguous; keep it open and unmodified until
     *              {@link PendingCollective#await()}
     * @param op the reduction
     * @param owner manager that owns the result
     * @return the pending collective; its {@code await()} returns chunk {@link #rank()} of the reduction
     */
    default PendingCollective startReduceScatter(NDArray input, ReduceOp op, NDManager owner) {
        NDArray out = reduceScatter(input, 0, op, owner);
        return () -> out;
    }

    /**
     * Starts {@link #allGather} along dim 0, letting it overlap the caller's later work where the
     * backend can (see {@link #startAllReduceInPlace}). The default runs it at once.
     *
     * @param input this rank's piece, contiguous; keep it open and unmodified until
     *              {@link PendingCollective#await()}
     * @param owner manager that owns the result
     * @return the pending collective; its {@code await()} returns every rank's piece concatenated along
     *         dim 0 in rank order
     */
    default PendingCollective startAllGather(NDArray input, NDManager owner) {
        NDArray out = allGather(input, 0, owner);
        return () -> out;
    }

    /**
     * {@link #allGather} along dim 0 into a tensor the caller holds: every rank's {@code input} in rank order,
     * written into {@code output}'s memory, which keeps its identity (ZeRO-3 gathers a bucket's weights into the
     * storage its parameters are views of). The default gathers into a new tensor and copies it in.
     *
     * @param input this rank's piece
     * @param output contiguous, {@code size()} times {@code input}'s elements along dim 0, same dtype and device
     * @throws IllegalArgumentException if {@code output}'s shape is not the gathered one
     */
    default void allGatherInto(NDArray input, NDArray output) {
        try (NDManager temp = output.getManager().newSubManager()) {
            NDArray gathered = allGather(input, 0, temp);
            if (!gathered.getShape().equals(output.getShape())) {
                throw new IllegalArgumentException(group().key() + " all-gather into a tensor of shape " + output.getShape()
                        + ": the gathered pieces have shape " + gathered.getShape());
            }
            Tensors.copyInto(output, gathered);
        }
    }

    /**
     * Starts {@link #allGatherInto}, letting it overlap the caller's later work where the backend can (see
     * {@link #startAllReduceInPlace}). The default runs it at once.
     *
     * @param input this rank's piece, contiguous; keep it open and unmodified until {@link PendingCollective#await()}
     * @param output as for {@link #allGatherInto}; not read or written by the caller until then
     * @return the pending collective; its {@code await()} returns {@code output}
     */
    default PendingCollective startAllGatherInto(NDArray input, NDArray output) {
        allGatherInto(input, output);
        return () -> output;
    }

    /**
     * Starts {@link #allToAll}, letting it overlap the caller's later work where the backend can (see
     * {@link #startAllReduceInPlace}). The default runs it at once.
     *
     * @param input this rank's rows, contiguous; keep it open and unmodified until {@link PendingCollective#await()}
     * @param sendSplits rows of {@code input} for each rank, in rank order
     * @param recvSplits rows to receive from each rank, in rank order
     * @param owner manager that owns the result
     * @return the pending exchange; its {@code await()} returns the received rows in rank order
     */
    default PendingCollective startAllToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner) {
        NDArray out = allToAll(input, sendSplits, recvSplits, owner);
        return () -> out;
    }

    /**
     * An all-to-all whose rows leave from and land at places of the caller's choosing, chunk by chunk: to rank
     * {@code j} this rank sends the chunks {@code send} lists for peer {@code j}, in order; from rank {@code i} it
     * receives the chunks {@code recv} lists for peer {@code i}, in order, each placed at its offset in the result.
     * Rank {@code i}'s chunks towards this rank must be, in number and size, this rank's chunks from rank {@code i}.
     * Reorders rows across the exchange (the expert dispatch's sort by local expert) with no gather or concatenation
     * of its own where the backend can place chunks; the default gathers the chunks in travel order
     * ({@link ChunkLayout#gather}), runs {@link #allToAll} and places what arrives ({@link ChunkLayout#place}).
     *
     * @param input this rank's rows, {@code send.rows()} of them
     * @param send where the chunks for each rank lie in {@code input}
     * @param recv where the chunks from each rank go in the result
     * @param owner manager that owns the result
     * @return {@code recv.rows()} rows
     * @throws IllegalArgumentException if a layout does not have a peer per rank or {@code send} not the input's rows
     */
    default NDArray allToAllChunks(NDArray input, ChunkLayout send, ChunkLayout recv, NDManager owner) {
        ChunkLayout.checkExchange(group(), input, send, recv);
        try (NDManager temp = owner.newSubManager()) {
            NDArray received = allToAll(send.gather(input, temp), send.rowsPerPeer(), recv.rowsPerPeer(), temp);
            NDArray out = recv.place(received, temp);
            out.attach(owner);
            return out;
        }
    }

    /**
     * Starts {@link #allToAllChunks} into a tensor the caller holds, letting it overlap the caller's later work where the
     * backend can (see {@link #startAllReduceInPlace}). The default runs it at once.
     *
     * @param input this rank's rows, {@code send.rows()} of them, contiguous; keep it open and unmodified until
     *              {@link PendingCollective#await()}
     * @param send where the chunks for each rank lie in {@code input}
     * @param recv where the chunks from each rank go in {@code output}
     * @param output contiguous, {@code recv.rows()} rows shaped as {@code input}'s, same dtype and device; not read or
     *               written by the caller until {@code await()}
     * @return the pending exchange; its {@code await()} returns {@code output}
     * @throws IllegalArgumentException if a layout does not fit, or {@code output} is not the received rows' shape
     */
    default PendingCollective startAllToAllChunks(NDArray input, ChunkLayout send, ChunkLayout recv, NDArray output) {
        ChunkLayout.checkExchange(group(), input, send, recv);
        ChunkLayout.checkTarget(group(), input, recv, output);
        try (NDManager temp = output.getManager().newSubManager()) {
            Tensors.copyInto(output, allToAllChunks(input, send, recv, temp));
        }
        return () -> output;
    }

    /**
     * Concatenates every rank's {@code input} along {@code dim}, in rank order. Inputs must have
     * equal shapes.
     *
     * @param input this rank's piece
     * @param dim the tensor dim to concatenate along
     * @param owner manager that owns the result
     * @return the concatenation
     */
    NDArray allGather(NDArray input, int dim, NDManager owner);

    /**
     * Reduces {@code input} across the group and returns this rank's equal chunk along {@code dim}.
     *
     * @param input this rank's contribution; its {@code dim} size must be divisible by the group size
     * @param dim the tensor dim to scatter along
     * @param op the reduction
     * @param owner manager that owns the result
     * @return chunk {@link #rank()} of the reduced tensor
     */
    NDArray reduceScatter(NDArray input, int dim, ReduceOp op, NDManager owner);

    /**
     * Copies {@code root}'s tensor to every rank.
     *
     * @param input on {@code root} the data; elsewhere a tensor of the same shape and dtype whose values are ignored
     * @param root group index of the sender
     * @param owner manager that owns the result
     * @return the root's data
     */
    NDArray broadcast(NDArray input, int root, NDManager owner);

    /**
     * Exchanges slices along dim 0: slice {@code j} of this rank's input (of {@code sendSplits[j]}
     * rows) goes to rank {@code j}; the result concatenates, in rank order, what each rank sent
     * here ({@code recvSplits[i]} rows from rank {@code i}).
     *
     * @param input this rank's rows, dim 0 summing to {@code sum(sendSplits)}
     * @param sendSplits rows sent to each rank
     * @param recvSplits rows received from each rank; must equal what they send
     * @param owner manager that owns the result
     * @return the received rows
     */
    NDArray allToAll(NDArray input, long[] sendSplits, long[] recvSplits, NDManager owner);

    /**
     * Sends a copy of {@code tensor} to {@code peer}. Returns once the data is handed to the
     * backend; the caller may then modify or close {@code tensor}. Messages between two ranks arrive
     * in the order sent.
     *
     * @param tensor the data
     * @param peer group index of the receiver
     */
    void send(NDArray tensor, int peer);

    /**
     * Receives the next tensor {@code peer} sent to this rank.
     *
     * @param shape expected shape (a mismatch is an error)
     * @param dtype expected dtype (a mismatch is an error)
     * @param peer group index of the sender
     * @param owner manager that owns the result
     * @return the data
     */
    NDArray recv(Shape shape, DataType dtype, int peer, NDManager owner);

    /**
     * Gathers one byte array from every rank (metadata, shapes, checkpoint indices).
     *
     * @param payload this rank's bytes
     * @return every rank's bytes, in rank order
     */
    List<byte[]> allGatherBytes(byte[] payload);

    /** Returns once every member has called it. */
    void barrier();
}
