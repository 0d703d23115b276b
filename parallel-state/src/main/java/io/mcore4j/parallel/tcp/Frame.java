package io.mcore4j.parallel.tcp;

import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * One message between two ranks: a small header that lets the receiver route it (channel, kind)
 * and check it (sequence number, operation, dtype, shape, row count) before touching the payload,
 * which is a tensor's bytes in little-endian order (or any bytes for all-gather-bytes).
 *
 * @param kind {@link #COLLECTIVE}, {@link #POINT_TO_POINT}, {@link #GOODBYE}, {@link #STATUS_QUERY} or
 *             {@link #STATUS_REPLY}
 * @param channel the communicator this frame belongs to (group key and instance)
 * @param sequence the sender's collective call number on the channel (0 for point-to-point; the
 *                 query's number for a status query or reply)
 * @param operation the sender's description of the call, e.g. {@code all-reduce SUM float32 (8, 4)}
 * @param dtype the payload's dtype, or null for raw bytes or none
 * @param shape the payload's shape, or null
 * @param count an operation-specific number (rows sent by all-to-all), else 0
 * @param payload the data; never null, possibly empty
 */
record Frame(byte kind, String channel, long sequence, String operation, DataType dtype, Shape shape, long count, byte[] payload) {
    static final byte COLLECTIVE = 1;
    static final byte POINT_TO_POINT = 2;
    /** The sender closed its backend: nothing more will come on this connection. */
    static final byte GOODBYE = 3;
    /** "What are you waiting for?": the receiver's reader thread answers with a {@link #STATUS_REPLY}. */
    static final byte STATUS_QUERY = 4;
    /** The answer to a {@link #STATUS_QUERY}: a {@link PeerStatus} in the payload. */
    static final byte STATUS_REPLY = 5;

    /** Wire codes of the dtypes a frame can carry (the index in this list). */
    static final List<DataType> DTYPES =
            List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64, DataType.INT32, DataType.INT64, DataType.BFLOAT16);

    private static final byte[] EMPTY = new byte[0];

    static Frame goodbye() {
        return new Frame(GOODBYE, "", 0, "", null, null, 0, EMPTY);
    }

    /**
     * A goodbye after a failure: {@code cause} says what failed on the sender, {@code blamed} the
     * ranks that failure named, so that peers failing afterwards name the root cause, not the sender.
     */
    static Frame goodbye(String cause, List<Integer> blamed) {
        ByteBuffer ranks = ByteBuffer.allocate(4 * blamed.size());
        for (int r : blamed) {
            ranks.putInt(r);
        }
        // writeUTF holds at most 65535 bytes
        String text = cause.length() > 4000 ? cause.substring(0, 4000) + "..." : cause;
        return new Frame(GOODBYE, "", 0, text, null, null, blamed.size(), ranks.array());
    }

    /** @return the ranks a goodbye after a failure blamed (empty for a clean goodbye) */
    List<Integer> blamed() {
        ByteBuffer ranks = ByteBuffer.wrap(payload);
        List<Integer> out = new ArrayList<>();
        for (long i = 0; i < count && ranks.remaining() >= 4; i++) {
            out.add(ranks.getInt());
        }
        return out;
    }

    /** A {@link #STATUS_QUERY} numbered {@code id}, which the reply repeats. */
    static Frame statusQuery(long id) {
        return new Frame(STATUS_QUERY, "", id, "", null, null, 0, EMPTY);
    }

    static byte[] empty() {
        return EMPTY;
    }

    void writeTo(DataOutputStream out) throws IOException {
        out.writeByte(kind);
        out.writeUTF(channel);
        out.writeLong(sequence);
        out.writeUTF(operation);
        out.writeByte(dtype == null ? -1 : DTYPES.indexOf(dtype));
        if (shape == null) {
            out.writeByte(-1);
        } else {
            out.writeByte(shape.dimension());
            for (long d : shape.getShape()) {
                out.writeLong(d);
            }
        }
        out.writeLong(count);
        out.writeInt(payload.length);
        out.write(payload);
    }

    static Frame readFrom(DataInputStream in) throws IOException {
        byte kind = in.readByte();
        String channel = in.readUTF();
        long sequence = in.readLong();
        String operation = in.readUTF();
        int code = in.readByte();
        if (code >= DTYPES.size()) {
            throw new IOException("unknown dtype code " + code + " in a frame for " + channel);
        }
        DataType dtype = code < 0 ? null : DTYPES.get(code);
        int dims = in.readByte();
        Shape shape = null;
        if (dims >= 0) {
            long[] s = new long[dims];
            for (int i = 0; i < dims; i++) {
                s[i] = in.readLong();
            }
            shape = new Shape(s);
        }
        long count = in.readLong();
        int length = in.readInt();
        if (length < 0) {
            throw new IOException("negative payload length " + length + " in a frame for " + channel);
        }
        byte[] payload = length == 0 ? EMPTY : new byte[length];
        in.readFully(payload);
        return new Frame(kind, channel, sequence, operation, dtype, shape, count, payload);
    }
}
