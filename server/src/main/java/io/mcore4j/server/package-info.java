/**
 * An OpenAI-compatible HTTP server over a {@link io.mcore4j.inference.engine.GenerationEngine}: {@code /v1/completions}
 * and {@code /v1/chat/completions} (whole answers or server-sent events), {@code /v1/models} and {@code /health}, on
 * Jetty's core API. The server owns text (tokenizing, chat templates, incremental detokenizing, stop strings) and the
 * wire format; the engine owns the model and the batch. {@link io.mcore4j.server.OpenAiServer} is the entry point.
 */
package io.mcore4j.server;
