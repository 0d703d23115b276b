package io.mcore4j.server;

import java.util.List;

/**
 * Cuts a stream of text at the first of a request's stop strings. Text is released only once no stop string can
 * still begin in it: the last {@code longest - 1} characters wait for the next piece, and {@link #flush()} releases
 * them when generation ends another way. Not thread-safe.
 */
final class StopStrings {
    private final List<String> stops;
    private final int holdBack;
    private final StringBuilder pending = new StringBuilder();
    private boolean stopped;

    /** @param stops the stop strings, each non-empty (none: text passes straight through) */
    StopStrings(List<String> stops) {
        this.stops = List.copyOf(stops);
        this.holdBack = stops.stream().mapToInt(String::length).max().orElse(1) - 1;
    }

    /**
     * @param text the next piece of generated text
     * @return the text that may be sent now: up to the stop string once one is found
     */
    String offer(String text) {
        if (stopped) {
            return "";
        }
        pending.append(text);
        int cut = -1;
        for (String stop : stops) {
            int at = pending.indexOf(stop);
            if (at >= 0 && (cut < 0 || at < cut)) {
                cut = at;
            }
        }
        if (cut >= 0) {
            stopped = true;
            String out = pending.substring(0, cut);
            pending.setLength(0);
            return out;
        }
        int release = pending.length() - holdBack;
        if (release > 0 && Character.isHighSurrogate(pending.charAt(release - 1))) {
            release--; // never split a character's two halves
        }
        if (release <= 0) {
            return "";
        }
        String out = pending.substring(0, release);
        pending.delete(0, release);
        return out;
    }

    /** @return whether a stop string was found */
    boolean stopped() {
        return stopped;
    }

    /** @return the text held back, once generation has ended without a stop string */
    String flush() {
        String out = pending.toString();
        pending.setLength(0);
        return out;
    }
}
