package io.mcore4j.server;

import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.util.thread.QueuedThreadPool;

/**
 * An OpenAI-compatible HTTP server for one {@link ServedModel}, on Jetty 12's core API (no servlets):
 * <ul>
 *   <li>{@code POST /v1/completions} and {@code POST /v1/chat/completions}: whole JSON answers with {@code usage},
 *       or, with {@code "stream": true}, server-sent events ({@code data: {...}} chunks, the last with its
 *       {@code finish_reason}, then {@code data: [DONE]});</li>
 *   <li>{@code GET /v1/models}: the served model; {@code GET /health} (and {@code /v1/health}): 200 while serving,
 *       503 once shutting down.</li>
 * </ul>
 * Errors are OpenAI's JSON: 400 for bad JSON or a bad parameter (named in {@code param}), 404 for an unknown route or
 * model, 405 for a wrong method, 429 when the engine's queue is full, 503 while shutting down.
 *
 * <p>The server submits to the model's engine and never closes it: whoever built the engine closes it after the
 * server.
 */
public final class OpenAiServer implements AutoCloseable {
    private final Server jetty;
    private final ServerConnector connector;
    private volatile boolean shuttingDown;

    private OpenAiServer(ServedModel model, ServerConfig config) {
        QueuedThreadPool pool = new QueuedThreadPool(config.maxThreads());
        pool.setName("openai-server");
        jetty = new Server(pool);
        connector = new ServerConnector(jetty);
        connector.setHost(config.host());
        connector.setPort(config.port());
        jetty.addConnector(connector);
        jetty.setHandler(new ApiHandler(model, () -> shuttingDown));
        jetty.setStopTimeout(2000);
    }

    /**
     * Starts serving.
     *
     * @param model the model and its engine
     * @param config where to listen
     * @return the running server
     * @throws java.io.IOException if the port cannot be bound
     */
    public static OpenAiServer start(ServedModel model, ServerConfig config) throws java.io.IOException {
        OpenAiServer server = new OpenAiServer(model, config);
        try {
            server.jetty.start();
        } catch (java.io.IOException e) {
            server.close();
            throw e;
        } catch (Exception e) {
            server.close();
            throw new IllegalStateException("the server could not start on " + config.host() + ":" + config.port(), e);
        }
        return server;
    }

    /** @return the port the server listens on */
    public int port() {
        return connector.getLocalPort();
    }

    /**
     * Blocks until the server stops.
     *
     * @throws InterruptedException if the waiting thread is interrupted
     */
    public void join() throws InterruptedException {
        jetty.join();
    }

    /** Stops taking requests (they get 503) and stops the server; requests still open are ended. */
    @Override
    public void close() {
        shuttingDown = true;
        try {
            jetty.stop();
        } catch (Exception e) {
            throw new IllegalStateException("the server did not stop cleanly", e);
        }
    }
}
