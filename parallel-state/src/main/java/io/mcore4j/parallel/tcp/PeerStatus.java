package io.mcore4j.parallel.tcp;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * What a rank says about itself when a peer that timed out waiting for it asks (a
 * {@link Frame#STATUS_QUERY}): the ranks its calls in progress still wait for, and its first
 * communication failure with the ranks that failure blamed. {@link WaitChain} follows these answers
 * to the rank that holds everyone up.
 *
 * @param waitingFor global ranks this rank's calls in progress still wait for (sorted, possibly empty)
 * @param waitingIn the first such call, e.g. {@code dp[1,3] all-reduce SUM float32 (2)}; empty if none
 * @param failure this rank's first communication failure; empty if none
 * @param blamed the ranks that failure blamed (empty without a failure)
 */
record PeerStatus(List<Integer> waitingFor, String waitingIn, String failure, List<Integer> blamed) {
    /** Longest text a status carries per field (the rest is cut, marked with "..."). */
    private static final int MAX_TEXT = 4000;

    PeerStatus {
        waitingFor = List.copyOf(waitingFor);
        blamed = List.copyOf(blamed);
        waitingIn = cut(waitingIn);
        failure = cut(failure);
    }

    /** @return true if this rank has failed */
    boolean failed() {
        return !failure.isEmpty();
    }

    /** @return this status as the {@link Frame#STATUS_REPLY} to query {@code id} */
    Frame reply(long id) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream d = new DataOutputStream(bytes)) {
            writeRanks(d, waitingFor);
            d.writeUTF(waitingIn);
            d.writeUTF(failure);
            writeRanks(d, blamed);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return new Frame(Frame.STATUS_REPLY, "", id, "", null, null, 0, bytes.toByteArray());
    }

    /**
     * @param reply a {@link Frame#STATUS_REPLY}
     * @return the status it carries
     * @throws IOException if the payload is not a status
     */
    static PeerStatus of(Frame reply) throws IOException {
        DataInputStream d = new DataInputStream(new ByteArrayInputStream(reply.payload()));
        List<Integer> waitingFor = readRanks(d);
        String waitingIn = d.readUTF();
        String failure = d.readUTF();
        return new PeerStatus(waitingFor, waitingIn, failure, readRanks(d));
    }

    private static void writeRanks(DataOutputStream d, List<Integer> ranks) throws IOException {
        d.writeInt(ranks.size());
        for (int r : ranks) {
            d.writeInt(r);
        }
    }

    private static List<Integer> readRanks(DataInputStream d) throws IOException {
        int n = d.readInt();
        if (n < 0 || n > d.available() / 4) {
            throw new IOException("a status reply lists " + n + " ranks in " + d.available() + " bytes");
        }
        List<Integer> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(d.readInt());
        }
        return out;
    }

    private static String cut(String text) {
        return text.length() > MAX_TEXT ? text.substring(0, MAX_TEXT) + "..." : text;
    }
}
