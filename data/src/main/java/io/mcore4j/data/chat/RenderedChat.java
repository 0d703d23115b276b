package io.mcore4j.data.chat;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/**
 * A conversation rendered by its chat template with the text each message's loop iterations wrote, and the
 * text inside {@code {% generation %}} blocks, as spans of {@link #text()} (UTF-16 indices, end exclusive).
 *
 * @param text the rendered text, exactly what {@link ChatTemplate#render} gives
 * @param messages per message index, the spans its iterations wrote (empty where the template wrote nothing
 *     for it inside a loop over the messages)
 * @param generations the {@code {% generation %}} spans, in order
 */
record RenderedChat(String text, List<List<Span>> messages, List<Span> generations) {
    /** Starts an iteration's text: this character, the message index in decimal, {@link #END_NUMBER}. */
    static final char BEGIN_MESSAGE = '\uFDD0';
    /** Ends the decimal index of a marker. */
    static final char END_NUMBER = '\uFDD1';
    /** Ends an iteration's text, with the index as {@link #BEGIN_MESSAGE}. */
    static final char END_MESSAGE = '\uFDD2';
    /** Starts a {@code {% generation %}} block. */
    static final char BEGIN_GENERATION = '\uFDD3';
    /** Ends a {@code {% generation %}} block. */
    static final char END_GENERATION = '\uFDD4';

    /**
     * A piece of the text.
     *
     * @param start first character
     * @param end one past the last character
     */
    record Span(int start, int end) {}

    /**
     * @param c a character
     * @return whether it is one of the markers, which conversations may not hold
     */
    static boolean isMarker(int c) {
        return c >= BEGIN_MESSAGE && c <= END_GENERATION;
    }

    /**
     * Takes the markers out of a tracked render.
     *
     * @param marked the template's output with markers
     * @param messageCount the conversation's messages
     * @param origin the template, for messages
     * @return the text and the spans
     * @throws ChatTemplateException if the markers do not nest (the template moved loop output around)
     */
    static RenderedChat parse(String marked, int messageCount, String origin) {
        StringBuilder text = new StringBuilder(marked.length());
        List<List<Span>> messages = new ArrayList<>();
        for (int k = 0; k < messageCount; k++) {
            messages.add(new ArrayList<>());
        }
        List<Span> generations = new ArrayList<>();
        Deque<int[]> open = new ArrayDeque<>(); // {kind, message or -1, start}
        for (int i = 0; i < marked.length(); i++) {
            char c = marked.charAt(i);
            if (!isMarker(c)) {
                text.append(c);
            } else if (c == BEGIN_GENERATION) {
                open.push(new int[] {BEGIN_GENERATION, -1, text.length()});
            } else if (c == END_GENERATION) {
                int[] begin = pop(open, BEGIN_GENERATION, -1, origin);
                generations.add(new Span(begin[2], text.length()));
            } else {
                int close = marked.indexOf(END_NUMBER, i);
                int message = Integer.parseInt(marked.substring(i + 1, close));
                i = close;
                if (c == BEGIN_MESSAGE) {
                    open.push(new int[] {BEGIN_MESSAGE, message, text.length()});
                } else {
                    int[] begin = pop(open, BEGIN_MESSAGE, message, origin);
                    if (text.length() > begin[2]) {
                        messages.get(message).add(new Span(begin[2], text.length()));
                    }
                }
            }
        }
        if (!open.isEmpty()) {
            throw unnested(origin);
        }
        return new RenderedChat(text.toString(), messages, generations);
    }

    private static int[] pop(Deque<int[]> open, int kind, int message, String origin) {
        int[] top = open.poll();
        if (top == null || top[0] != kind || top[1] != message) {
            throw unnested(origin);
        }
        return top;
    }

    private static ChatTemplateException unnested(String origin) {
        return new ChatTemplateException("chat template " + origin + " writes the text of its loops over the messages"
                + " or of its {% generation %} blocks out of order (through a variable?): the text of each message"
                + " cannot be told apart", null);
    }
}
