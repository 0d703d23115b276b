package io.mcore4j.checkpoint;

/**
 * What a load does about missing keys (requested by some rank but absent from the checkpoint) and
 * unexpected keys (in the checkpoint but requested by no rank). Both sets are computed over all
 * ranks, so every rank takes the same decision; they are always returned in {@link LoadResult}.
 * "Raise" throws {@link IncompatibleCheckpointException} on every rank before any tensor is read;
 * "log" writes one warning (on rank 0) and goes on. Targets whose key is missing are left untouched.
 */
public enum StrictMode {
    /** Raise on missing and on unexpected keys. */
    RAISE_ALL(true, true, false, false),
    /** Raise on missing keys; log unexpected ones. */
    RAISE_MISSING(true, false, false, true),
    /** Raise on unexpected keys; log missing ones. */
    RAISE_UNEXPECTED(false, true, true, false),
    /** Log both and go on. */
    LOG_ALL(false, false, true, true),
    /** Only return both in the {@link LoadResult}; no log, no exception. */
    RETURN_ALL(false, false, false, false);

    private final boolean raiseMissing;
    private final boolean raiseUnexpected;
    private final boolean logMissing;
    private final boolean logUnexpected;

    StrictMode(boolean raiseMissing, boolean raiseUnexpected, boolean logMissing, boolean logUnexpected) {
        this.raiseMissing = raiseMissing;
        this.raiseUnexpected = raiseUnexpected;
        this.logMissing = logMissing;
        this.logUnexpected = logUnexpected;
    }

    /** @return whether missing keys make the load fail */
    public boolean raisesMissing() {
        return raiseMissing;
    }

    /** @return whether unexpected keys make the load fail */
    public boolean raisesUnexpected() {
        return raiseUnexpected;
    }

    /** @return whether missing keys are logged */
    public boolean logsMissing() {
        return logMissing;
    }

    /** @return whether unexpected keys are logged */
    public boolean logsUnexpected() {
        return logUnexpected;
    }
}
