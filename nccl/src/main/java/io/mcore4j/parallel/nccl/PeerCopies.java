package io.mcore4j.parallel.nccl;

import static io.mcore4j.cuda.DevicePointers.pointer;
import static org.bytedeco.cuda.global.cudart.CU_STREAM_WAIT_VALUE_EQ;
import static org.bytedeco.cuda.global.cudart.CU_STREAM_WRITE_VALUE_DEFAULT;
import static org.bytedeco.cuda.global.cudart.cuStreamWaitValue32;
import static org.bytedeco.cuda.global.cudart.cuStreamWriteValue32;
import static org.bytedeco.cuda.global.cudart.cudaDeviceCanAccessPeer;
import static org.bytedeco.cuda.global.cudart.cudaFree;
import static org.bytedeco.cuda.global.cudart.cudaGetErrorString;
import static org.bytedeco.cuda.global.cudart.cudaIpcCloseMemHandle;
import static org.bytedeco.cuda.global.cudart.cudaIpcGetMemHandle;
import static org.bytedeco.cuda.global.cudart.cudaIpcMemLazyEnablePeerAccess;
import static org.bytedeco.cuda.global.cudart.cudaIpcOpenMemHandle;
import static org.bytedeco.cuda.global.cudart.cudaMalloc;
import static org.bytedeco.cuda.global.cudart.cudaMemcpy;
import static org.bytedeco.cuda.global.cudart.cudaMemcpyAsync;
import static org.bytedeco.cuda.global.cudart.cudaMemcpyDefault;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.cuda.SlotSum;
import io.mcore4j.parallel.ChunkLayout;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.function.Function;

import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.cudart.cudaIpcMemHandle_t;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.Pointer;

/**
 * Transfers between the members of one group on one host by the GPUs' copy engines instead of NCCL's kernels: the
 * copies hold no SMs, so a product running beside them keeps its speed (on 2×H200 a 16 MiB push to the peer took
 * 47 µs and hid 89–93% behind the TP2 products it ran beside, where NCCL's all-gather hid 4–7%:
 * {@code scripts/gpu/overlap_probe.py}).
 *
 * <p><b>Memory.</b> Each member allocates one device buffer ({@code cudaMalloc}, outside libtorch's caching allocator,
 * whose expandable segments cannot be shared between processes): a page of flags, then one slot per member of
 * {@code slotBytes}. The buffers' IPC handles are exchanged once through the group ({@link #open}), and every member
 * maps every other member's buffer.
 *
 * <p><b>Protocol</b>, all on the stream given, so that it is ordered like any other work there and a CUDA graph can
 * hold it: a message from member {@code i} to member {@code j} travels in rounds of at most a slot. In a round,
 * {@code i} waits until {@code j} has emptied slot {@code i} of {@code j}'s buffer ({@code j}'s "free" flag in
 * {@code i}'s page), copies the piece into it and sets the "ready" flag for {@code i} in {@code j}'s page (a stream
 * write, which the driver fences after the copy); {@code j} waits for that flag, clears it, copies the piece out into
 * its result and sets {@code i}'s "free" flag for it again. Flags go back to where they started by the end of every
 * exchange, so a replayed graph finds them as its capture did. Every round sends to all peers before it receives from
 * them, so no member waits for one that waits for it. A member's own rows are copied locally.
 *
 * <p>Everything a member decides here (the rounds of each message) follows from sizes both ends of the message
 * know, so every member takes the same path. Not thread-safe: the communicator calls it inside its sections.
 */
final class PeerCopies implements AutoCloseable {
    /** Bytes of the flag page at the head of each buffer: {@code ready[i]} at int {@code i}, {@code free[j]} at int {@code size + j}. */
    static final long FLAG_BYTES = 4096;

    private final int rank;
    private final int size;
    private final long slotBytes;
    private final long own;
    private final long[] peers;

    /**
     * @param rank this member
     * @param size members
     * @param slotBytes bytes of one slot
     * @param own address of this member's buffer
     * @param peers address of each member's buffer as this member reaches it (its own at {@code rank})
     */
    PeerCopies(int rank, int size, long slotBytes, long own, long[] peers) {
        this.rank = rank;
        this.size = size;
        this.slotBytes = slotBytes;
        this.own = own;
        this.peers = peers;
    }

    /**
     * Allocates this member's buffer and maps every other member's; a collective call of the group (every member calls
     * it at the same point, with the same slot size).
     *
     * @param rank this member
     * @param size members
     * @param device this member's CUDA device
     * @param slotBytes bytes of one slot, a positive multiple of 16
     * @param exchange all-gathers one byte array per member over the group (in rank order)
     * @param why where the reason goes when the result is null
     * @return the transfers, or null when the members do not share a host, some member cannot reach another's memory
     *     or could not map it (then {@code why[0]} says why, the same on every member)
     */
    static PeerCopies open(int rank, int size, int device, long slotBytes, Function<byte[], List<byte[]>> exchange,
                           String[] why) {
        if (slotBytes <= 0 || slotBytes % 16 != 0) {
            throw new IllegalArgumentException("a peer-copy slot of " + slotBytes + " bytes: expected a positive multiple of 16");
        }
        long total = FLAG_BYTES + size * slotBytes;
        Pointer base = new Pointer();
        check(cudaMalloc(base, total), "cudaMalloc(" + total + ")");
        long own = base.address();
        long[] peers = new long[size];
        peers[rank] = own;
        PeerCopies opened = new PeerCopies(rank, size, slotBytes, own, peers); // close() releases what is mapped so far
        try {
            int[] flags = new int[2 * size];
            Arrays.fill(flags, size, 2 * size, 1); // every slot starts free
            check(cudaMemcpy(pointer(own), new IntPointer(flags), 4L * flags.length, cudaMemcpyDefault), "cudaMemcpy(flags)");
            cudaIpcMemHandle_t handle = new cudaIpcMemHandle_t();
            check(cudaIpcGetMemHandle(handle, pointer(own)), "cudaIpcGetMemHandle");
            BytePointer raw = handle.reserved();
            byte[] host = hostName().getBytes(StandardCharsets.UTF_8);
            byte[] mine = new byte[68 + host.length];
            raw.get(mine, 0, 64);
            ByteBuffer.wrap(mine, 64, 4).order(ByteOrder.LITTLE_ENDIAN).putInt(device);
            System.arraycopy(host, 0, mine, 68, host.length);
            List<byte[]> all = exchange.apply(mine);
            // decided from what all of them sent, the same on every member
            why[0] = unreachable(all, mine, rank);
            if (why[0] == null) {
                String failed = null;
                for (int j = 0; j < size && failed == null; j++) {
                    if (j == rank) {
                        continue;
                    }
                    cudaIpcMemHandle_t theirs = new cudaIpcMemHandle_t();
                    theirs.reserved().put(all.get(j), 0, 64);
                    Pointer mapped = new Pointer();
                    try {
                        check(cudaIpcOpenMemHandle(mapped, theirs, cudaIpcMemLazyEnablePeerAccess),
                                "cudaIpcOpenMemHandle(member " + j + ")");
                        peers[j] = mapped.address();
                    } catch (IllegalStateException e) {
                        failed = e.getMessage();
                    }
                }
                // every member maps, or none uses the transport: a second exchange tells each what the others managed
                byte[] status = (failed == null ? "" : "member " + rank + ": " + failed).getBytes(StandardCharsets.UTF_8);
                for (byte[] theirs : exchange.apply(status)) {
                    if (theirs.length > 0 && why[0] == null) {
                        why[0] = new String(theirs, StandardCharsets.UTF_8);
                    }
                }
            }
            if (why[0] != null) {
                opened.close();
                return null;
            }
            return opened;
        } catch (RuntimeException e) {
            opened.close();
            throw e;
        }
    }

    /**
     * Why some member cannot reach another's memory, from what every member sent (its IPC handle, device and host
     * name), or null: members on another host, or two on one device or on devices without peer access.
     */
    private static String unreachable(List<byte[]> all, byte[] mine, int rank) {
        int size = all.size();
        for (int i = 0; i < size; i++) {
            if (!Arrays.equals(all.get(i), 68, all.get(i).length, mine, 68, mine.length)) {
                return "member " + i + " runs on host " + hostOf(all.get(i)) + ", member " + rank + " on " + hostName();
            }
        }
        for (int i = 0; i < size; i++) {
            for (int j = 0; j < size; j++) {
                int di = deviceOf(all.get(i));
                int dj = deviceOf(all.get(j));
                if (i != j && (di == dj || !canAccess(di, dj))) {
                    return "member " + i + " (device " + di + ") cannot map member " + j + "'s memory (device " + dj + ")";
                }
            }
        }
        return null;
    }

    private static String hostName() {
        try {
            return InetAddress.getLocalHost().getHostName();
        } catch (UnknownHostException e) {
            return "unknown (" + e.getMessage() + ")";
        }
    }

    private static String hostOf(byte[] sent) {
        return new String(sent, 68, sent.length - 68, StandardCharsets.UTF_8);
    }

    private static int deviceOf(byte[] sent) {
        return ByteBuffer.wrap(sent, 64, 4).order(ByteOrder.LITTLE_ENDIAN).getInt();
    }

    private static boolean canAccess(int from, int to) {
        int[] can = new int[1];
        check(cudaDeviceCanAccessPeer(can, from, to), "cudaDeviceCanAccessPeer(" + from + ", " + to + ")");
        return can[0] == 1;
    }

    /** The device work an exchange queues, in order: on a CUDA stream, or in a test's simulation. */
    interface Queue {
        /** Copies {@code bytes} from {@code src} to {@code dst}. */
        void copy(long dst, long src, long bytes);

        /** Waits until the int at {@code flag} is 1, then sets it to 0. */
        void waitAndClear(long flag);

        /** Sets the int at {@code flag} to {@code value} once the work before it is done and visible. */
        void write(long flag, int value);

        /**
         * {@code out = in + in[slotBytes] + ...}: the elementwise sum of {@code slots} slots of {@code bytes} each, in
         * slot order ({@code out} may be one of them).
         */
        void sum(long out, long in, int slots, long slotBytes, long bytes, DataType dtype);
    }

    /**
     * {@link Queue} on a CUDA stream: copies by {@code cudaMemcpyAsync}, flags by the stream memory operations, sums by
     * mcore4j's {@link SlotSum} kernel (null where no all-reduce is queued).
     */
    record StreamQueue(CUstream_st on, SlotSum slotSum) implements Queue {
        @Override
        public void copy(long dst, long src, long bytes) {
            check(cudaMemcpyAsync(pointer(dst), pointer(src), bytes, cudaMemcpyDefault, on), "cudaMemcpyAsync");
        }

        @Override
        public void waitAndClear(long flag) {
            checkDriver(cuStreamWaitValue32(on, flag, 1, CU_STREAM_WAIT_VALUE_EQ), "cuStreamWaitValue32");
            write(flag, 0);
        }

        @Override
        public void write(long flag, int value) {
            // the default flags fence the write after the stream's earlier work (the copies) for every reader
            checkDriver(cuStreamWriteValue32(on, flag, value, CU_STREAM_WRITE_VALUE_DEFAULT), "cuStreamWriteValue32");
        }

        @Override
        public void sum(long out, long in, int slots, long slotBytes, long bytes, DataType dtype) {
            slotSum.sum(out, in, slots, slotBytes, bytes, dtype, on);
        }
    }

    /**
     * Where one side's messages lie: member {@code j}'s message is the pieces {@code lengths[j][c]} bytes from byte
     * {@code offsets[j][c]}, in order. Unlike a {@link ChunkLayout}, pieces of different members may overlap (an
     * all-gather sends the same rows to every member).
     *
     * @param offsets first byte of each piece, per member
     * @param lengths bytes of each piece, per member
     */
    record Pieces(long[][] offsets, long[][] lengths) {
        /** A chunk layout's rows as bytes. */
        static Pieces of(ChunkLayout layout, long rowBytes) {
            long[][] offsets = new long[layout.peers()][];
            long[][] lengths = new long[layout.peers()][];
            for (int j = 0; j < offsets.length; j++) {
                offsets[j] = Arrays.stream(layout.offsets()[j]).map(r -> r * rowBytes).toArray();
                lengths[j] = Arrays.stream(layout.sizes()[j]).map(r -> r * rowBytes).toArray();
            }
            return new Pieces(offsets, lengths);
        }

        /** The same {@code bytes} from byte 0 for each of {@code size} members (what an all-gather sends). */
        static Pieces same(int size, long bytes) {
            long[][] offsets = new long[size][];
            long[][] lengths = new long[size][];
            for (int j = 0; j < size; j++) {
                offsets[j] = new long[] {0};
                lengths[j] = new long[] {bytes};
            }
            return new Pieces(offsets, lengths);
        }

        /** {@code bytes} per member in member order (what an all-gather receives). */
        static Pieces rankMajor(int size, long bytes) {
            long[][] offsets = new long[size][];
            long[][] lengths = new long[size][];
            for (int j = 0; j < size; j++) {
                offsets[j] = new long[] {j * bytes};
                lengths[j] = new long[] {bytes};
            }
            return new Pieces(offsets, lengths);
        }

        long total(int member) {
            return Arrays.stream(lengths[member]).sum();
        }

        /** {offset of byte {@code at} of the member's message, bytes left in its piece}. */
        long[] locate(int member, long at) {
            long seen = 0;
            for (int c = 0; c < lengths[member].length; c++) {
                long len = lengths[member][c];
                if (at < seen + len) {
                    return new long[] {offsets[member][c] + (at - seen), seen + len - at};
                }
                seen += len;
            }
            throw new IllegalStateException("byte " + at + " lies past member " + member + "'s " + seen + " bytes");
        }
    }

    /**
     * Member {@code j}'s message in {@code send} goes from {@code src} to member {@code j}; member {@code i}'s message
     * in {@code recv} comes from member {@code i} into {@code dst}. The two ends of each message must agree on its
     * bytes (as the ends of an NCCL send and receive must).
     *
     * @param src address the messages are read from
     * @param send where each member's message lies there
     * @param dst address the messages land at
     * @param recv where each member's message lands there
     * @param on where the work goes
     */
    void exchange(long src, Pieces send, long dst, Pieces recv, Queue on) {
        long[] sendBytes = new long[size];
        long[] recvBytes = new long[size];
        for (int j = 0; j < size; j++) {
            sendBytes[j] = send.total(j);
            recvBytes[j] = recv.total(j);
        }
        if (sendBytes[rank] != recvBytes[rank]) {
            throw new IllegalArgumentException("member " + rank + " sends itself " + sendBytes[rank] + " bytes but expects "
                    + recvBytes[rank]);
        }
        copy(src, send, dst, recv, rank, 0, sendBytes[rank], on); // own rows, locally
        long rounds = 0;
        for (int j = 0; j < size; j++) {
            if (j != rank) {
                rounds = Math.max(rounds, Math.max(roundsOf(sendBytes[j]), roundsOf(recvBytes[j])));
            }
        }
        for (long r = 0; r < rounds; r++) {
            long from = r * slotBytes;
            for (int k = 1; k < size; k++) {
                int j = (rank + k) % size;
                if (r < roundsOf(sendBytes[j])) {
                    on.waitAndClear(own + 4L * (size + j));
                    // this round's piece into slot `rank` of member j's buffer: the slot stands at byte `from` of the
                    // message (a null layout places byte `at` at base + at)
                    copy(src, send, peers[j] + FLAG_BYTES + rank * slotBytes - from, null, j, from,
                            Math.min(slotBytes, sendBytes[j] - from), on);
                    on.write(peers[j] + 4L * rank, 1);
                }
            }
            for (int k = 1; k < size; k++) {
                int i = (rank - k + size) % size;
                if (r < roundsOf(recvBytes[i])) {
                    on.waitAndClear(own + 4L * i);
                    // out of slot i of this buffer, which holds bytes [from, from + slot) of member i's message
                    copy(own + FLAG_BYTES + i * slotBytes - from, null, dst, recv, i, from,
                            Math.min(slotBytes, recvBytes[i] - from), on);
                    on.write(peers[i] + 4L * (size + rank), 1);
                }
            }
        }
    }

    /**
     * Whether {@link #allReduce} takes a tensor of {@code elements} of {@code dtype}: float32, float16 or bfloat16,
     * cut into one part per member of a 16-byte multiple. Decided from what every member knows alike.
     *
     * @param elements the tensor's elements
     * @param dtype its dtype
     * @return whether the copy-engine all-reduce takes it
     */
    boolean reduces(long elements, DataType dtype) {
        boolean floating = dtype == DataType.FLOAT32 || dtype == DataType.FLOAT16 || dtype == DataType.BFLOAT16;
        return floating && elements % size == 0 && elements / size * dtype.getNumOfBytes() % 16 == 0;
    }

    /**
     * The sum over the members of a tensor of {@code bytes} at {@code src} into {@code dst} (which may be {@code src}):
     * a reduce-scatter, then an all-gather, both by {@link #exchange}. Part {@code j} of the tensor (a {@code 1 / size}
     * of it) is member {@code j}'s to sum: every member sends part {@code j} of its tensor to member {@code j}, which
     * receives the parts into {@code dst}'s rows of the senders (its own copied there), sums them in member order with
     * one kernel into its part, and sends the sum to every member. Every member sums a part alike, so all results are
     * equal. In place, each round sends a part's piece before anything lands on it.
     *
     * @param src address of this member's tensor
     * @param dst address of the result, {@code bytes} (16-byte aligned)
     * @param bytes the tensor's bytes; {@link #reduces} must hold
     * @param dtype the elements' type
     * @param on where the work goes
     */
    void allReduce(long src, long dst, long bytes, DataType dtype, Queue on) {
        long part = bytes / size;
        Pieces parts = Pieces.rankMajor(size, part);
        // reduce-scatter: part j of src to member j; member i's part `rank` lands in dst's part i (slot i of the sum)
        exchange(src, parts, dst, parts, on);
        on.sum(dst + rank * part, dst, size, part, part, dtype);
        // all-gather: the sum to every member, member i's into dst's part i
        exchange(dst + rank * part, Pieces.same(size, part), dst, parts, on);
    }

    /**
     * The sum over the members of part {@code rank} of a tensor of {@code bytes} at {@code src} into {@code dst} (a
     * {@code 1 / size} of it): the exchange of {@link #allReduce}'s first half into {@code scratch} (one part per
     * member), then the sum. {@code src} is left as it was.
     *
     * @param src address of this member's tensor
     * @param scratch address of {@code bytes} the parts land in (16-byte aligned)
     * @param dst address of this member's part of the sum (16-byte aligned; may be in {@code scratch})
     * @param bytes the tensor's bytes; {@link #reduces} must hold
     * @param dtype the elements' type
     * @param on where the work goes
     */
    void reduceScatter(long src, long scratch, long dst, long bytes, DataType dtype, Queue on) {
        long part = bytes / size;
        Pieces parts = Pieces.rankMajor(size, part);
        exchange(src, parts, scratch, parts, on);
        on.sum(dst, scratch, size, part, part, dtype);
    }

    /** Rounds of a message of {@code bytes}: none for an empty one. */
    private long roundsOf(long bytes) {
        return (bytes + slotBytes - 1) / slotBytes;
    }

    /**
     * Copies bytes {@code [from, from + bytes)} of member {@code member}'s message from {@code srcBase} (through
     * {@code srcPieces}; null: the message lies contiguously there) to {@code dstBase} (likewise).
     */
    private static void copy(long srcBase, Pieces srcPieces, long dstBase, Pieces dstPieces, int member, long from,
                             long bytes, Queue on) {
        long done = 0;
        while (done < bytes) {
            long at = from + done;
            long[] s = srcPieces == null ? new long[] {at, Long.MAX_VALUE} : srcPieces.locate(member, at);
            long[] d = dstPieces == null ? new long[] {at, Long.MAX_VALUE} : dstPieces.locate(member, at);
            long n = Math.min(bytes - done, Math.min(s[1], d[1]));
            if (dstBase + d[0] != srcBase + s[0]) { // in place: already there
                on.copy(dstBase + d[0], srcBase + s[0], n);
            }
            done += n;
        }
    }

    private static void checkDriver(int status, String call) {
        if (status != 0) {
            throw new IllegalStateException(call + " failed: CUresult " + status);
        }
    }

    private static void check(int status, String call) {
        if (status != 0) {
            String text;
            try {
                text = cudaGetErrorString(status).getString();
            } catch (RuntimeException e) {
                text = "error " + status;
            }
            throw new IllegalStateException(call + " failed: " + text + " (" + status + ")");
        }
    }

    /** Unmaps the other members' buffers (those mapped so far) and frees this one's. Call when no queued exchange is left. */
    @Override
    public void close() {
        for (int j = 0; j < size; j++) {
            if (j != rank && peers[j] != 0) {
                cudaIpcCloseMemHandle(pointer(peers[j]));
            }
        }
        cudaFree(pointer(own));
    }
}
