package io.mcore4j.parallel.nccl;

import java.util.Arrays;

/**
 * The 128 bytes of an {@code ncclUniqueId}, as exchanged through the rendezvous store: the store
 * value is exactly these bytes, nothing else. The bytes hold the bootstrap address of the
 * communicator's rank 0, so they are as sensitive as the store itself.
 *
 * @param bytes the id, exactly {@link #BYTES} long (copied)
 */
record UniqueId(byte[] bytes) {
    /** Size of {@code ncclUniqueId} ({@code NCCL_UNIQUE_ID_BYTES}). */
    static final int BYTES = 128;

    /** Validates the length and copies the bytes. */
    UniqueId {
        if (bytes == null || bytes.length != BYTES) {
            throw new IllegalArgumentException("an NCCL unique id has " + BYTES + " bytes, got "
                    + (bytes == null ? "none" : bytes.length));
        }
        bytes = bytes.clone();
    }

    /**
     * Decodes a store value.
     *
     * @param value what the store holds
     * @param key the store key it was read from, for the error message
     * @return the id
     * @throws IllegalStateException if the value is not a unique id
     */
    static UniqueId decode(byte[] value, String key) {
        if (value == null || value.length != BYTES) {
            throw new IllegalStateException("store key '" + key + "' holds " + (value == null ? "nothing" : value.length + " bytes")
                    + ", not an NCCL unique id of " + BYTES + " bytes");
        }
        return new UniqueId(value);
    }

    /** @return the bytes to store (a copy) */
    @Override
    public byte[] bytes() {
        return bytes.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof UniqueId u && Arrays.equals(bytes, u.bytes);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(bytes);
    }

    /** @return a short fingerprint, never the bytes (they name a bootstrap address) */
    @Override
    public String toString() {
        return "UniqueId[" + Integer.toHexString(hashCode()) + "]";
    }
}
