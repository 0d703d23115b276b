package io.mcore4j.parallel.rendezvous;

import java.util.List;

/**
 * A blocking store read gave up: the keys it waited for were not set within its timeout. The
 * connection stays usable.
 */
public class StoreTimeoutException extends StoreException {
    private static final long serialVersionUID = 1L;

    private final List<String> missingKeys;

    /**
     * @param message what timed out, naming the store, the keys and the timeout
     * @param missingKeys the keys still absent when the wait ended
     */
    public StoreTimeoutException(String message, List<String> missingKeys) {
        super(message, null);
        this.missingKeys = List.copyOf(missingKeys);
    }

    /** @return the keys that were still absent, never empty */
    public List<String> missingKeys() {
        return missingKeys;
    }
}
