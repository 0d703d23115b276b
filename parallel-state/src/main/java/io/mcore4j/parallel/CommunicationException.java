package io.mcore4j.parallel;

import java.util.List;

/**
 * A collective or point-to-point operation failed: a peer timed out, died, or called a different
 * operation or shape. The message names the group, the operation and the ranks concerned. After
 * this exception the communicator that threw it is broken; every later call on it throws too.
 */
public class CommunicationException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String group;
    private final String operation;
    private final List<Integer> ranks;

    /**
     * @param group the group key, e.g. {@code tp[0,1]}
     * @param operation what was being done, e.g. {@code all-reduce SUM [4, 8] FLOAT32}
     * @param ranks the global ranks concerned (missing peers), possibly empty
     * @param message what went wrong
     * @param cause the underlying failure, or null
     */
    public CommunicationException(String group, String operation, List<Integer> ranks, String message, Throwable cause) {
        super(group + " " + operation + ": " + message, cause);
        this.group = group;
        this.operation = operation;
        this.ranks = List.copyOf(ranks);
    }

    /** @return the group key */
    public String group() {
        return group;
    }

    /** @return the operation */
    public String operation() {
        return operation;
    }

    /** @return the global ranks concerned (e.g. those that never arrived) */
    public List<Integer> ranks() {
        return ranks;
    }
}
