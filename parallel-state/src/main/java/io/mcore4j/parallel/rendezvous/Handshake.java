package io.mcore4j.parallel.rendezvous;

import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.security.SecureRandom;

/**
 * The first bytes on every connection, store and peer alike, which authenticate both sides.
 *
 * <ol>
 *   <li>The accepting side sends a magic number, what it is (purpose, its rank, the world size) and
 *       a fresh 16-byte nonce.</li>
 *   <li>The connecting side answers with its own purpose, rank and world size, a {@link JobToken}
 *       proof over the nonce and every claim, and a fresh nonce of its own.</li>
 *   <li>The accepting side checks that proof and replies with a status byte and a reason; when it
 *       accepts, it adds its own proof over both nonces and its claims, which the connecting side
 *       checks before it sends anything else.</li>
 * </ol>
 * So a process that binds a job's port first, or answers at a peer's address, without the token
 * cannot pose as the store or a rank: the connecting side refuses it. The two proofs are
 * domain-separated (one cannot stand for the other) and cover fresh nonces (a recorded one cannot
 * be replayed). Anything else (a port scanner, a process of another job, an older protocol) is
 * rejected before it can send a request. Traffic after the handshake is not encrypted.
 */
public final class Handshake {
    /** "M4J2": mcore4j wire protocol, version 2 (mutual authentication). */
    public static final int MAGIC = 0x4D344A32;
    /** Purpose byte of a connection to the rendezvous store. */
    public static final byte STORE = 1;
    /** Purpose byte of a connection between two ranks. */
    public static final byte PEER = 2;
    private static final int NONCE_BYTES = 16;
    private static final int PROOF_BYTES = 32;
    private static final byte OK = 0;
    private static final byte REJECTED = 1;
    private static final byte CLIENT_PROOF = 'C';
    private static final byte SERVER_PROOF = 'S';

    private Handshake() {}

    /**
     * What a connecting side claims to be, after its token proof has been checked, and the proof the
     * accepting side will return in {@link #accept}.
     *
     * @param rank the rank the client claims (-1 for a store client without one)
     * @param worldSize the world size it claims (-1 for a store client)
     * @param serverProof this side's proof over the client's nonce, sent on acceptance
     */
    public record Hello(int rank, int worldSize, byte[] serverProof) {}

    /** The other side refused this connection, did not speak the protocol, or did not prove the token. */
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
     * {@link #accept} or {@link #reject}.
     *
     * @param in the connection's input
     * @param out the connection's output
     * @param token the job token
     * @param purpose {@link #STORE} or {@link #PEER}
     * @param myRank this side's rank (-1 for the store)
     * @param worldSize the world size (-1 for the store)
     * @param random where nonces come from
     * @return what the client claims, proven
     * @throws IOException if the connection fails
     * @throws RejectedException if the client did not speak the protocol or prove the token
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
            reject(out, "not an mcore4j " + versionName() + " connection");
            throw new RejectedException("the client does not speak mcore4j's protocol " + versionName()
                    + " (first word 0x" + Integer.toHexString(magic) + ")");
        }
        byte theirPurpose = in.readByte();
        int theirRank = in.readInt();
        int theirWorld = in.readInt();
        byte[] proof = new byte[PROOF_BYTES];
        in.readFully(proof);
        byte[] theirNonce = new byte[NONCE_BYTES];
        in.readFully(theirNonce);
        if (!token.verify(signed(CLIENT_PROOF, nonce, null, theirPurpose, theirRank, theirWorld, myRank, worldSize), proof)) {
            reject(out, "job token mismatch");
            throw new RejectedException("client claiming rank " + theirRank + " presented a wrong job token");
        }
        if (theirPurpose != purpose) {
            reject(out, "wrong service: this is " + name(purpose));
            throw new RejectedException("client claiming rank " + theirRank + " wanted " + name(theirPurpose)
                    + " but this is " + name(purpose));
        }
        byte[] serverProof = token.prove(signed(SERVER_PROOF, theirNonce, nonce, purpose, theirRank, theirWorld, myRank, worldSize));
        return new Hello(theirRank, theirWorld, serverProof);
    }

    /**
     * Accepting side, second half: accepts the client and proves this side's token in return.
     *
     * @param out the connection's output
     * @param hello what {@link #challenge} returned
     * @throws IOException if the connection fails
     */
    public static void accept(DataOutputStream out, Hello hello) throws IOException {
        out.writeByte(OK);
        out.writeUTF("welcome");
        out.write(hello.serverProof());
        out.flush();
    }

    /**
     * Accepting side: refuses the client with a reason.
     *
     * @param out the connection's output
     * @param reason why, for the client's message
     * @throws IOException if the connection fails
     */
    public static void reject(DataOutputStream out, String reason) throws IOException {
        out.writeByte(REJECTED);
        out.writeUTF(reason);
        out.flush();
    }

    /**
     * Connecting side: answers the challenge, waits for the verdict and checks the server's proof.
     *
     * @param in the connection's input
     * @param out the connection's output
     * @param token the job token
     * @param purpose {@link #STORE} or {@link #PEER}
     * @param myRank this side's rank (-1 for a store client without one)
     * @param worldSize the world size (-1 for a store client)
     * @param expectedServerRank the rank the caller meant to reach, or -1 for the store
     * @param random where this side's nonce comes from
     * @throws IOException if the connection fails
     * @throws RejectedException if the server refused, is not who it should be, or did not prove the token
     */
    public static void respond(DataInputStream in, DataOutputStream out, JobToken token, byte purpose, int myRank, int worldSize,
                               int expectedServerRank, SecureRandom random) throws IOException {
        int magic = in.readInt();
        if (magic != MAGIC) {
            throw new RejectedException("the server does not speak mcore4j's protocol " + versionName()
                    + " (first word 0x" + Integer.toHexString(magic) + ")");
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
        byte[] myNonce = new byte[NONCE_BYTES];
        random.nextBytes(myNonce);
        out.writeInt(MAGIC);
        out.writeByte(purpose);
        out.writeInt(myRank);
        out.writeInt(worldSize);
        out.write(token.prove(signed(CLIENT_PROOF, nonce, null, purpose, myRank, worldSize, serverRank, serverWorld)));
        out.write(myNonce);
        out.flush();
        byte verdict = in.readByte();
        String reason = in.readUTF();
        if (verdict != OK) {
            throw new RejectedException("rejected by " + name(purpose) + ": " + reason);
        }
        byte[] serverProof = new byte[PROOF_BYTES];
        in.readFully(serverProof);
        if (!token.verify(signed(SERVER_PROOF, myNonce, nonce, purpose, myRank, worldSize, serverRank, serverWorld), serverProof)) {
            throw new RejectedException(name(purpose) + " claiming rank " + serverRank + " did not prove it knows the job token "
                    + "(an impostor on the port, or another job's process)");
        }
    }

    /** What a proof covers: its direction, the nonce(s) and every claim either side relies on. */
    private static byte[] signed(byte direction, byte[] nonce, byte[] otherNonce, byte purpose, int clientRank, int clientWorld,
                                 int serverRank, int serverWorld) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream d = new DataOutputStream(bytes)) {
            d.writeByte(direction);
            d.write(nonce);
            if (otherNonce != null) {
                d.write(otherNonce);
            }
            d.writeByte(purpose);
            d.writeInt(clientRank);
            d.writeInt(clientWorld);
            d.writeInt(serverRank);
            d.writeInt(serverWorld);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return bytes.toByteArray();
    }

    private static String versionName() {
        return "version " + ((MAGIC & 0xFF) - '0');
    }

    private static String name(byte purpose) {
        return switch (purpose) {
            case STORE -> "the rendezvous store";
            case PEER -> "a peer rank";
            default -> "an unknown service " + purpose;
        };
    }
}
