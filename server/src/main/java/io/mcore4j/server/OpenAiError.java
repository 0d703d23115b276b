package io.mcore4j.server;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A request the server answers with an error: the HTTP status and OpenAI's error object,
 * {@code {"error": {"message", "type", "param", "code"}}}. Thrown while a request is parsed or submitted; the
 * handler turns it into the response.
 */
public final class OpenAiError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String type;
    private final String param;
    private final String code;

    /**
     * @param status the HTTP status (4xx or 5xx)
     * @param type OpenAI's error type ({@code invalid_request_error}, ...)
     * @param param the request field at fault, or null
     * @param code a machine-readable code ({@code model_not_found}, ...), or null
     * @param message what is wrong: the value and what was expected
     */
    public OpenAiError(int status, String type, String param, String code, String message) {
        super(message);
        if (status < 400 || status > 599) {
            throw new IllegalArgumentException("an error's HTTP status " + status + " must be 4xx or 5xx");
        }
        this.status = status;
        this.type = type;
        this.param = param;
        this.code = code;
    }

    /**
     * A 400 naming the field at fault.
     *
     * @param param the request field
     * @param message the value and what was expected
     * @return the error
     */
    public static OpenAiError badRequest(String param, String message) {
        return new OpenAiError(400, "invalid_request_error", param, null, message);
    }

    /** @return the HTTP status */
    public int status() {
        return status;
    }

    /** @return the request field at fault, or null */
    public String param() {
        return param;
    }

    /** @return OpenAI's {@code {"error": {...}}} object */
    public Map<String, Object> body() {
        Map<String, Object> error = new LinkedHashMap<>();
        error.put("message", getMessage());
        error.put("type", type);
        error.put("param", param);
        error.put("code", code);
        return Map.of("error", error);
    }
}
