package io.mcore4j.server;

/**
 * Where and how an {@link OpenAiServer} listens.
 *
 * @param host the interface to bind ({@code 0.0.0.0} for all, {@code 127.0.0.1} for this machine only)
 * @param port the TCP port, or 0 for any free one ({@link OpenAiServer#port()} says which)
 * @param maxThreads Jetty's pool size: every open request holds one thread until its last byte, so this bounds the
 *     requests open at once (those beyond wait for a thread); keep it above the engine's running and waiting
 *     requests so that a full engine answers 429 before the pool runs out
 */
public record ServerConfig(String host, int port, int maxThreads) {
    /** vLLM's default port. */
    public static final int DEFAULT_PORT = 8000;

    /** Validates the values, naming the bad one. */
    public ServerConfig {
        if (host == null || host.isBlank()) {
            throw new IllegalArgumentException("host must be an interface name or address, got "
                    + (host == null ? "none" : "\"" + host + "\""));
        }
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException("port " + port + " must be in [0, 65535] (0 = any free port)");
        }
        if (maxThreads < 8) {
            throw new IllegalArgumentException("max threads " + maxThreads + " must be at least 8 (Jetty's acceptors"
                    + " and selectors take some)");
        }
    }

    /**
     * @param host the interface
     * @param port the port (0 = any free one)
     * @return a configuration with a pool of 256 threads
     */
    public static ServerConfig of(String host, int port) {
        return new ServerConfig(host, port, 256);
    }
}
