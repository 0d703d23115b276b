package io.mcore4j.data.chat;

/**
 * A chat template that cannot be rendered for a conversation: the template refused it ({@code raise_exception}),
 * uses a construct jinjava cannot render (the message names the template, the line and the construct), or
 * renders an assistant turn where its tokens cannot be told apart. A bad input, so an
 * {@link IllegalArgumentException}.
 */
public final class ChatTemplateException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message what went wrong, on one line
     * @param cause the underlying failure, or null
     */
    public ChatTemplateException(String message, Throwable cause) {
        super(message, cause);
    }
}
