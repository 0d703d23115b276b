package io.mcore4j.planner;

/**
 * No layout of the search both passes the training setup's checks and fits in memory. The message
 * names the constraints that rejected layouts (with how many each rejected) and, where layouts ran
 * but did not fit, the smallest memory peak found and what it is made of.
 */
public final class NoLayoutFitsException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    /** @param message what ruled the layouts out */
    public NoLayoutFitsException(String message) {
        super(message);
    }
}
