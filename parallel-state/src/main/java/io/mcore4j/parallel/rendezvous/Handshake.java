package io.mcore4j.parallel.rendezvous;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.security.SecureRandom;

/**
 * The first bytes on every connection, store and peer alike. The accepting side sends a magic
 * number, what it is (purpose, its rank, the world size) and a fresh 16-byte nonce; the connecting
 * side answers with its own purpose, rank and world size and a {@link JobToken} proof over all of
 * it; the accepting side replies with a status byte and a reason. Anything else (a port scanner, a
 * process of another job, an older protocol) is rejected before it can send a request.
 */
public final class Handshake {
    /** "M4J1": mcore4j wire protocol, version 1. */
    public static final int MAGIC = 0x4D344A31;
    /** Purpose byte of a connection to the rendezvous store. */
    public static final byte STORE = 1;
    /** Purpose byte of a connection between two ranks. */
    public static final byte PEER = 2;
    private static final int NONCE_BYTES = 16;
    private static final int PROOF_BYTES = 32;
    private static final byte OK = 0;
    private static final byte REJECTED = 1;

    private Handshake() {}

    /** What a connecting side claims to be, after its token proof has been checked. */
    public record Hello(int rank, int worldSize) {}

    /** The other side refused this connection or did not speak the protocol. */
    public static final class RejectedException extends IOException {
        private static final long serialVersionUID = 1L;

        /** @param message why */
        public RejectedException(String message) {
            super(message);
        }
    }

    /**
     * Accepting side, first half: challenges the client and checks its proof. On a bad proof or
     * protocol it writes a rejection and throws; otherwise the caller checks the hello and calls
     * {@link #reply}.
     */
    public static Hello challenge(DataInputStream in, DataOutputStream out, JobToken token, byte purpose, int myRank, int worldSize,
                           SecureRandom random) throws IOException {
        byte[] nonce = new byte[NONCE_BYTES];
        random.nextBytes(nonce);
        out.writeInt(MAGIC);
        out.writeByte(purpose);
        out.writeInt(myRank);
        out.writeInt(worldSize);
        out.write(nonce);
        out.flush();
        int magic = in.readInt();
        if (magic != MAGIC) {
            reply(out, false, "not an mcore4j connection");
            throw new RejectedException("the client does not speak mcore4j's protocol (first word 0x" + Integer.toHexString(magic) + ")");
        }
        byte theirPurpose = in.readByte();
        int theirRank = in.readInt();
        int theirWorld = in.readInt();
        byte[] proof = new byte[PROOF_BYTES];
        in.readFully(proof);
        if (!token.verify(signed(nonce, theirPurpose, theirRank, theirWorld, myRank), proof)) {
            reply(out, false, "job token mismatch");
            throw new RejectedException("client claiming rank " + theirRank + " presented a wrong job token");
        }
        if (theirPurpose != purpose) {
            reply(out, false, "wrong service: this is " + name(purpose));
            throw new RejectedException("client claiming rank " + theirRank + " wanted " + name(theirPurpose)
                    + " but this is " + name(purpose));
        }
        return new Hello(theirRank, theirWorld);
    }

    /** Accepting side, second half: accepts or rejects with a reason. */
    public static void reply(DataOutputStream out, boolean ok, String reason) throws IOException {
        out.writeByte(ok ? OK : REJECTED);
        out.writeUTF(reason);
        out.flush();
    }

    /**
     * Connecting side: answers the challenge and waits for the verdict.
     *
     * @param expectedServerRank the rank the caller meant to reach, or -1 for the store
     * @throws RejectedException if the server refused or is not who it should be
     */
    public static void respond(DataInputStream in, DataOutputStream out, JobToken token, byte purpose, int myRank, int worldSize,
                        int expectedServerRank) throws IOException {
        int magic = in.readInt();
        if (magic != MAGIC) {
            throw new RejectedException("the server does not speak mcore4j's protocol (first word 0x" + Integer.toHexString(magic) + ")");
        }
        byte serverPurpose = in.readByte();
        int serverRank = in.readInt();
        int serverWorld = in.readInt();
        byte[] nonce = new byte[NONCE_BYTES];
        in.readFully(nonce);
        if (serverPurpose != purpose) {
            throw new RejectedException("expected " + name(purpose) + " but reached " + name(serverPurpose));
        }
        if (expectedServerRank >= 0 && (serverRank != expectedServerRank || serverWorld != worldSize)) {
            throw new RejectedException("expected rank " + expectedServerRank + " of " + worldSize + " but reached rank "
                    + serverRank + " of " + serverWorld + " (a stale address?)");
        }
        out.writeInt(MAGIC);
        out.writeByte(purpose);
        out.writeInt(myRank);
        out.writeInt(worldSize);
        out.write(token.prove(signed(nonce, purpose, myRank, worldSize, serverRank)));
        out.flush();
        byte verdict = in.readByte();
        String reason = in.readUTF();
        if (verdict != OK) {
            throw new RejectedException("rejected by " + name(purpose) + ": " + reason);
        }
    }

    /** What the proof covers: the nonce and every claim either side relies on. */
    private static byte[] signed(byte[] nonce, byte purpose, int clientRank, int clientWorld, int serverRank) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream d = new DataOutputStream(bytes)) {
            d.write(nonce);
            d.writeByte(purpose);
            d.writeInt(clientRank);
            d.writeInt(clientWorld);
            d.writeInt(serverRank);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return bytes.toByteArray();
    }

    private static String name(byte purpose) {
        return switch (purpose) {
            case STORE -> "the rendezvous store";
            case PEER -> "a peer rank";
            default -> "an unknown service " + purpose;
        };
    }
}
