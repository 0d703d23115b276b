package io.mcore4j.parallel.nccl;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;
import io.mcore4j.parallel.rendezvous.StoreException;
import io.mcore4j.parallel.rendezvous.StoreTimeoutException;
import io.mcore4j.parallel.rendezvous.TcpStore;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

/**
 * Hands the NCCL unique id of one new communicator from the group's rank 0 to the other members
 * through the rendezvous store, and holds every member until all have arrived.
 *
 * <p>Keys, for a communicator key {@code K} (e.g. {@code nccl/tp[0,1]}): {@code K} holds the 128 id
 * bytes, set by group rank 0; {@code K/arrived/<global rank>} marks each member's arrival,
 * {@code K/count} counts arrivals and {@code K/all} is set by the last to arrive. Every member
 * waits for {@code K/all}, so no member enters {@code ncclCommInitRank} (which blocks, without a
 * timeout, until all members have entered it) unless every member is alive and on its way there; a
 * member that never arrives makes the others fail at the timeout with a
 * {@link CommunicationException} naming it. Keys are never reused: the backend numbers repeated
 * communicators over one group.
 */
final class CommIdExchange {
    /** Operation named in errors. */
    static final String OPERATION = "create NCCL communicator";

    private CommIdExchange() {}

    /**
     * @param store the rendezvous store
     * @param key the communicator's store key
     * @param group the group (this process is at {@code group.rank()})
     * @param newId makes a fresh id; called on group rank 0 only
     * @param timeout how long to wait for the other members
     * @return the id every member of the group gets
     * @throws CommunicationException if some member does not arrive in time or the store fails
     */
    static UniqueId exchange(TcpStore store, String key, ProcessGroup group, Supplier<UniqueId> newId, Duration timeout) {
        String arrived = key + "/arrived/";
        String all = key + "/all";
        try {
            if (group.rank() == 0) {
                store.set(key, newId.get().bytes());
            }
            store.set(arrived + group.globalRank(group.rank()), new byte[] {1});
            if (store.add(key + "/count", 1) == group.size()) {
                store.set(all, "1".getBytes(StandardCharsets.UTF_8));
            }
            try {
                store.waitFor(List.of(all), timeout);
            } catch (StoreTimeoutException e) {
                List<Integer> missing = missing(store, arrived, group);
                throw new CommunicationException(group.key(), OPERATION, missing, "rank(s) " + missing
                        + " did not arrive within " + timeout.toMillis() + " ms", e);
            }
            return UniqueId.decode(store.get(key, timeout), key);
        } catch (StoreException e) {
            throw new CommunicationException(group.key(), OPERATION, List.of(group.globalRank(0)),
                    "the rendezvous store failed: " + e.getMessage(), e);
        }
    }

    private static List<Integer> missing(TcpStore store, String arrived, ProcessGroup group) {
        List<String> keys = new ArrayList<>();
        for (int r : group.ranks()) {
            keys.add(arrived + r);
        }
        List<Integer> missing = new ArrayList<>();
        try {
            store.waitFor(keys, Duration.ofMillis(1));
        } catch (StoreTimeoutException t) {
            for (String k : t.missingKeys()) {
                missing.add(Integer.parseInt(k.substring(arrived.length())));
            }
        }
        return missing;
    }
}
