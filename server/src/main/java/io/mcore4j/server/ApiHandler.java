package io.mcore4j.server;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import org.eclipse.jetty.http.HttpHeader;
import org.eclipse.jetty.io.Content;
import org.eclipse.jetty.server.Handler;
import org.eclipse.jetty.server.Request;
import org.eclipse.jetty.server.Response;
import org.eclipse.jetty.util.Callback;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.function.BooleanSupplier;

/**
 * The routes of {@link OpenAiServer}, on Jetty's core API. A generating request holds one of Jetty's pool threads
 * from its body to its last byte: the thread parses and tokenizes, submits to the engine, then waits on the
 * request's {@link GenerationRun} and writes each piece as it comes (blocking writes: a slow client slows only its
 * own thread, never the engine, whose callbacks only queue). A write that fails (the client left) or a failure Jetty
 * reports on the request cancels the engine's request. Every error is OpenAI's JSON with its status; once a stream
 * has started, an error is a last {@code data: {"error": ...}} event before {@code data: [DONE]}, as vLLM sends it.
 */
final class ApiHandler extends Handler.Abstract {
    private static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping()
            .serializeSpecialFloatingPointValues().create();
    private static final byte[] DONE = "data: [DONE]\n\n".getBytes(StandardCharsets.UTF_8);

    private final ServedModel model;
    private final BooleanSupplier shuttingDown;
    private final long created = System.currentTimeMillis() / 1000;
    private final Map<String, Endpoint> endpoints = new LinkedHashMap<>();

    /**
     * @param model the served model
     * @param shuttingDown true once the server stops taking requests (they get 503)
     */
    ApiHandler(ServedModel model, BooleanSupplier shuttingDown) {
        super(InvocationType.BLOCKING);
        this.model = model;
        this.shuttingDown = shuttingDown;
        for (Endpoint e : List.of(new CompletionsEndpoint(), new ChatCompletionsEndpoint())) {
            endpoints.put(e.path(), e);
        }
    }

    @Override
    public boolean handle(Request request, Response response, Callback callback) {
        String path = Request.getPathInContext(request);
        String method = request.getMethod();
        try {
            Endpoint endpoint = endpoints.get(path);
            if (path.equals("/health") || path.equals("/v1/health")) {
                expect(method, "GET", path);
                if (shuttingDown.getAsBoolean()) {
                    throw shutdown();
                }
                response.setStatus(200);
                callback.succeeded();
            } else if (path.equals("/v1/models")) {
                expect(method, "GET", path);
                writeJson(response, callback, 200, models());
            } else if (endpoint != null) {
                expect(method, "POST", path);
                if (shuttingDown.getAsBoolean()) {
                    throw shutdown();
                }
                generate(endpoint, request, response, callback);
            } else {
                throw new OpenAiError(404, "invalid_request_error", null, null, "unknown route " + method + " " + path
                        + " (this server answers POST " + String.join(", POST ", endpoints.keySet())
                        + ", GET /v1/models and GET /health)");
            }
        } catch (OpenAiError e) {
            writeJson(response, callback, e.status(), e.body());
        } catch (RuntimeException e) {
            writeJson(response, callback, 500, new OpenAiError(500, "server_error", null, null, e.toString()).body());
        }
        return true;
    }

    private static void expect(String method, String allowed, String path) {
        if (!method.equals(allowed)) {
            throw new OpenAiError(405, "invalid_request_error", null, "method_not_allowed", path + " answers "
                    + allowed + ", not " + method);
        }
    }

    private static OpenAiError shutdown() {
        return new OpenAiError(503, "service_unavailable", null, null, "the server is shutting down");
    }

    private Map<String, Object> models() {
        Map<String, Object> card = new LinkedHashMap<>();
        card.put("id", model.name());
        card.put("object", "model");
        card.put("created", created);
        card.put("owned_by", "mcore4j");
        card.put("root", model.name());
        card.put("parent", null);
        card.put("max_model_len", model.engine().maxSequenceLength());
        Map<String, Object> list = new LinkedHashMap<>();
        list.put("object", "list");
        list.put("data", List.of(card));
        return list;
    }

    private void generate(Endpoint endpoint, Request request, Response response, Callback callback) {
        String body;
        try {
            body = Content.Source.asString(request, StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw OpenAiError.badRequest(null, "the request body could not be read: " + e.getMessage());
        }
        Endpoint.Prepared prepared = endpoint.prepare(RequestFields.parse(body, endpoint.fields()), model);
        GenerationRun run = GenerationRun.submit(model, prepared.prompt(), prepared.params());
        // the engine's wait is no idle time: a request queued or generating is never failed for it
        request.addIdleTimeoutListener(timeout -> false);
        request.addFailureListener(failure -> run.cancel());
        String id = endpoint.idPrefix() + UUID.randomUUID().toString().replace("-", "");
        long now = System.currentTimeMillis() / 1000;
        boolean done = false;
        try {
            if (prepared.stream()) {
                stream(endpoint, prepared, run, id, now, response, callback);
            } else {
                whole(endpoint, prepared, run, id, now, response, callback);
            }
            done = true;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            callback.failed(e);
        } catch (IOException e) {
            callback.failed(e); // the client left: nobody to answer
        } finally {
            if (!done) {
                run.cancel();
            }
        }
    }

    private void whole(Endpoint endpoint, Endpoint.Prepared p, GenerationRun run, String id, long now, Response response,
                       Callback callback) throws InterruptedException {
        StringBuilder text = new StringBuilder(p.echo());
        Endpoint.TokenLog log = p.params().logprobs() ? new Endpoint.TokenLog() : null;
        GenerationRun.Piece piece;
        do {
            piece = run.next();
            if (log != null) {
                log.add(model.tokenizer(), piece, text.length());
            }
            text.append(piece.text());
        } while (piece.finishReason() == null);
        List<Object> choices = List.of(endpoint.choice(text.toString(), log, piece.finishReason()));
        Map<String, Object> answer = endpoint.envelope(endpoint.object(), id, now, model, choices);
        answer.put("usage", Endpoint.usage(run));
        writeJson(response, callback, 200, answer);
    }

    private void stream(Endpoint endpoint, Endpoint.Prepared p, GenerationRun run, String id, long now, Response response,
                        Callback callback) throws InterruptedException, IOException {
        response.setStatus(200);
        response.getHeaders().put(HttpHeader.CONTENT_TYPE, "text/event-stream; charset=utf-8");
        response.getHeaders().put(HttpHeader.CACHE_CONTROL, "no-cache");
        int offset = p.echo().length();
        boolean first = true;
        if (endpoint.opensStream(p)) {
            event(response, chunk(endpoint, p, id, now, endpoint.chunkChoice(p.echo(), null, true, null)));
            first = false;
        }
        try {
            GenerationRun.Piece piece;
            do {
                piece = run.next();
                Endpoint.TokenLog log = null;
                if (p.params().logprobs()) {
                    log = new Endpoint.TokenLog();
                    log.add(model.tokenizer(), piece, offset);
                }
                offset += piece.text().length();
                if (!piece.text().isEmpty() || piece.finishReason() != null) {
                    event(response, chunk(endpoint, p, id, now, endpoint.chunkChoice(piece.text(), log, first,
                            piece.finishReason())));
                    first = false;
                }
            } while (piece.finishReason() == null);
            if (p.includeUsage()) {
                Map<String, Object> usage = endpoint.envelope(endpoint.chunkObject(), id, now, model, List.of());
                usage.put("usage", Endpoint.usage(run));
                event(response, usage);
            }
        } catch (OpenAiError e) {
            event(response, e.body());
        }
        Content.Sink.write(response, true, ByteBuffer.wrap(DONE));
        callback.succeeded();
    }

    private Map<String, Object> chunk(Endpoint endpoint, Endpoint.Prepared p, String id, long now, Map<String, Object> choice) {
        List<Object> choices = new ArrayList<>();
        choices.add(choice);
        Map<String, Object> chunk = endpoint.envelope(endpoint.chunkObject(), id, now, model, choices);
        if (p.includeUsage()) {
            chunk.put("usage", null);
        }
        return chunk;
    }

    /** One server-sent event, written before the call returns. */
    private static void event(Response response, Object json) throws IOException {
        byte[] bytes = ("data: " + GSON.toJson(json) + "\n\n").getBytes(StandardCharsets.UTF_8);
        Content.Sink.write(response, false, ByteBuffer.wrap(bytes));
    }

    private static void writeJson(Response response, Callback callback, int status, Object json) {
        response.setStatus(status);
        response.getHeaders().put(HttpHeader.CONTENT_TYPE, "application/json");
        Content.Sink.write(response, true, GSON.toJson(json), callback);
    }
}
