package io.mcore4j.parallel.inprocess;

import io.mcore4j.parallel.CommunicationException;
import io.mcore4j.parallel.ProcessGroup;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * A reusable meeting point for the members of one group: each member posts a payload and an
 * operation description and receives everyone's payloads once all have arrived. A timeout or an
 * abort breaks the rendezvous for good, and every waiting or later member gets the same
 * {@link CommunicationException}.
 */
final class Rendezvous {
    private final String groupKey;
    private final int[] globalRanks;
    private Object[] slots;
    private String[] operations;
    private int arrived;
    private long generation;
    private Object[] lastPayloads;
    private String[] lastOperations;
    private CommunicationException broken;

    Rendezvous(ProcessGroup group) {
        this.groupKey = group.key();
        this.globalRanks = group.ranks();
        this.slots = new Object[globalRanks.length];
        this.operations = new String[globalRanks.length];
    }

    /**
     * Posts {@code payload} and waits for every member.
     *
     * @return every member's payload, in group order
     * @throws CommunicationException on timeout, abort, or a member calling a different operation
     */
    synchronized Object[] exchange(int index, String operation, Object payload, long timeoutNanos) {
        if (broken != null) {
            throw broken;
        }
        long gen = generation;
        slots[index] = payload;
        operations[index] = operation;
        arrived++;
        if (arrived == slots.length) {
            lastPayloads = slots;
            lastOperations = operations;
            slots = new Object[slots.length];
            operations = new String[slots.length];
            arrived = 0;
            generation++;
            notifyAll();
            checkSameOperation(lastOperations);
            return lastPayloads;
        }
        long deadline = System.nanoTime() + timeoutNanos;
        while (generation == gen && broken == null) {
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                List<Integer> missing = new ArrayList<>();
                for (int i = 0; i < operations.length; i++) {
                    if (operations[i] == null) {
                        missing.add(globalRanks[i]);
                    }
                }
                broken = new CommunicationException(groupKey, operation, missing,
                        "timed out after " + timeoutNanos / 1_000_000 + " ms waiting for rank(s) " + missing, null);
                notifyAll();
                throw broken;
            }
            try {
                wait(remaining / 1_000_000, (int) (remaining % 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                abort(new CommunicationException(groupKey, operation, List.of(globalRanks[index]),
                        "rank " + globalRanks[index] + " was interrupted", e));
                throw broken;
            }
        }
        if (generation == gen) {
            throw broken;
        }
        // the next round cannot complete before this member posts again, so these are still ours
        checkSameOperation(lastOperations);
        return lastPayloads;
    }

    /** Breaks the rendezvous: waiting and later members fail with {@code cause}. */
    synchronized void abort(CommunicationException cause) {
        if (broken == null) {
            broken = cause;
        }
        notifyAll();
    }

    private void checkSameOperation(String[] ops) {
        for (int i = 1; i < ops.length; i++) {
            if (!Objects.equals(ops[0], ops[i])) {
                StringBuilder b = new StringBuilder("members called different operations:");
                for (int k = 0; k < ops.length; k++) {
                    b.append(" rank ").append(globalRanks[k]).append(": ").append(ops[k]).append(';');
                }
                // every member runs this check on the same descriptions and throws the same error
                throw new CommunicationException(groupKey, ops[0], List.of(), b.toString(), null);
            }
        }
    }
}
