package io.mcore4j.parallel.rendezvous;

/**
 * A rendezvous store operation failed: the store could not be reached, refused this client's job
 * token, closed, or answered with an error. The message names the store's address and the key.
 */
public class StoreException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message what failed, naming the store and the key
     * @param cause the underlying failure, or null
     */
    public StoreException(String message, Throwable cause) {
        super(message, cause);
    }
}
