package io.mcore4j.parallel.tcp;

import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.List;

/**
 * One message between two ranks: a small header that lets the receiver route it (channel, kind)
 * and check it (sequence number, operation, dtype, shape, row count) before touching the payload,
 * which is a tensor's bytes in little-endian order (or any bytes for all-gather-bytes).
 *
 * @param kind {@link #COLLECTIVE}, {@link #POINT_TO_POINT} or {@link #GOODBYE}
 * @param channel the communicator this frame belongs to (group key and instance)
 * @param sequence the sender's collective call number on the channel (0 for point-to-point)
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

    /** Wire codes of the dtypes a frame can carry (the index in this list). */
    static final List<DataType> DTYPES =
            List.of(DataType.FLOAT32, DataType.FLOAT16, DataType.FLOAT64, DataType.INT32, DataType.INT64, DataType.BFLOAT16);

    private static final byte[] EMPTY = new byte[0];

    static Frame goodbye() {
        return new Frame(GOODBYE, "", 0, "goodbye", null, null, 0, EMPTY);
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
