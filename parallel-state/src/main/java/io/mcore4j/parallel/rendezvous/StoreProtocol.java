package io.mcore4j.parallel.rendezvous;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;

/**
 * Requests and replies between {@link TcpStore} and {@link TcpStoreServer}, after the
 * {@link Handshake}. A request is an op byte and its fields; a reply is a status byte and its
 * fields. Keys are modified UTF-8 strings, values length-prefixed bytes.
 */
final class StoreProtocol {
    static final byte SET = 1;
    static final byte GET = 2;
    static final byte ADD = 3;
    static final byte WAIT = 4;

    static final byte OK = 0;
    static final byte TIMEOUT = 1;
    static final byte ERROR = 2;

    /** Largest value the store accepts: it holds addresses and small metadata, not tensors. */
    static final int MAX_VALUE_BYTES = 64 << 20;

    /** Most keys one wait may name. */
    static final int MAX_KEYS_PER_WAIT = 10_000;

    private StoreProtocol() {}

    static void writeBytes(DataOutputStream out, byte[] value) throws IOException {
        out.writeInt(value.length);
        out.write(value);
    }

    static byte[] readBytes(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > MAX_VALUE_BYTES) {
            throw new IOException("store value of " + n + " bytes is outside [0, " + MAX_VALUE_BYTES + "]");
        }
        byte[] value = new byte[n];
        in.readFully(value);
        return value;
    }
}
