package io.mcore4j.parallel.launch;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Expands Slurm's compressed host lists, as found in {@code SLURM_JOB_NODELIST}: comma-separated
 * entries, each a host name in which bracketed sets of numbers and ranges stand for several hosts.
 * {@code node[01-03,07]} is {@code node01 node02 node03 node07} (a range keeps its lower bound's
 * zero padding), {@code gpu-a[1,3],gpu-b5} is {@code gpu-a1 gpu-a3 gpu-b5}, and several brackets
 * in one entry expand to their product in order ({@code r[1-2]-n[1-2]} is {@code r1-n1 r1-n2 r2-n1 r2-n2}).
 *
 * <p>Stateless; every method throws {@link IllegalArgumentException} naming the list and what is
 * wrong with it (empty entry, unbalanced bracket, descending range, non-numeric range).
 */
public final class SlurmNodeList {
    /** Expanding more hosts than this is refused: no real job is that large, a typo can be. */
    public static final int MAX_HOSTS = 1 << 20;

    private SlurmNodeList() {}

    /**
     * Every host of {@code nodeList}, in Slurm's order.
     *
     * @param nodeList a compressed host list such as {@code node[01-04,07],login1}
     * @return the host names, never empty
     * @throws IllegalArgumentException if the list is malformed or expands to more than {@link #MAX_HOSTS}
     */
    public static List<String> expand(String nodeList) {
        List<String> hosts = new ArrayList<>();
        for (String entry : entries(nodeList)) {
            List<String> partial = List.of("");
            for (Piece piece : pieces(nodeList, entry)) {
                if (piece.count() > MAX_HOSTS || partial.size() * piece.count() + hosts.size() > MAX_HOSTS) {
                    throw new IllegalArgumentException("node list '" + nodeList + "' expands to more than "
                            + MAX_HOSTS + " hosts");
                }
                List<String> next = new ArrayList<>();
                for (String head : partial) {
                    piece.forEach(tail -> next.add(head + tail));
                }
                partial = next;
            }
            hosts.addAll(partial);
        }
        return List.copyOf(hosts);
    }

    /**
     * The first host of {@code nodeList} (where Slurm jobs conventionally run rank 0), found
     * without expanding the list.
     *
     * @param nodeList a compressed host list
     * @return its first host
     * @throws IllegalArgumentException if the list is malformed
     */
    public static String first(String nodeList) {
        List<String> entries = entries(nodeList);
        StringBuilder host = new StringBuilder();
        for (Piece piece : pieces(nodeList, entries.get(0))) {
            host.append(piece.first());
        }
        // the other entries are still validated, so that a typo anywhere is reported
        for (int i = 1; i < entries.size(); i++) {
            pieces(nodeList, entries.get(i));
        }
        return host.toString();
    }

    /** Literal text, or a bracket's ranges as {@code {from, to, width}} triples. */
    private record Piece(String literal, List<long[]> ranges) {
        long count() {
            if (literal != null) {
                return 1;
            }
            long n = 0;
            for (long[] r : ranges) {
                n += r[1] - r[0] + 1;
            }
            return n;
        }

        String first() {
            return literal != null ? literal : format(ranges.get(0)[0], ranges.get(0)[2]);
        }

        void forEach(java.util.function.Consumer<String> sink) {
            if (literal != null) {
                sink.accept(literal);
                return;
            }
            for (long[] r : ranges) {
                for (long n = r[0]; n <= r[1]; n++) {
                    sink.accept(format(n, r[2]));
                }
            }
        }

        private static String format(long n, long width) {
            return String.format(Locale.ROOT, "%0" + width + "d", n);
        }
    }

    /** Splits at commas outside brackets. */
    private static List<String> entries(String nodeList) {
        if (nodeList == null || nodeList.isBlank()) {
            throw new IllegalArgumentException("node list is empty");
        }
        List<String> entries = new ArrayList<>();
        int depth = 0;
        int start = 0;
        for (int i = 0; i < nodeList.length(); i++) {
            char c = nodeList.charAt(i);
            if (c == '[') {
                depth++;
                if (depth > 1) {
                    throw new IllegalArgumentException("node list '" + nodeList + "' nests brackets at position " + i);
                }
            } else if (c == ']') {
                depth--;
                if (depth < 0) {
                    throw new IllegalArgumentException("node list '" + nodeList + "' closes a bracket it never opened at position " + i);
                }
            } else if (c == ',' && depth == 0) {
                entries.add(nodeList.substring(start, i));
                start = i + 1;
            }
        }
        if (depth != 0) {
            throw new IllegalArgumentException("node list '" + nodeList + "' has an unclosed bracket");
        }
        entries.add(nodeList.substring(start));
        for (String e : entries) {
            if (e.isBlank()) {
                throw new IllegalArgumentException("node list '" + nodeList + "' has an empty entry");
            }
        }
        return entries;
    }

    /** One entry as a sequence of pieces: literal text and bracketed number sets. */
    private static List<Piece> pieces(String nodeList, String entry) {
        List<Piece> pieces = new ArrayList<>();
        int i = 0;
        while (i < entry.length()) {
            int open = entry.indexOf('[', i);
            if (open < 0) {
                pieces.add(new Piece(entry.substring(i), null));
                break;
            }
            if (open > i) {
                pieces.add(new Piece(entry.substring(i, open), null));
            }
            int close = entry.indexOf(']', open);
            pieces.add(new Piece(null, ranges(nodeList, entry.substring(open + 1, close))));
            i = close + 1;
        }
        return pieces;
    }

    /** Parses {@code 01-03,07} into ranges that keep the lower bound's zero padding. */
    private static List<long[]> ranges(String nodeList, String set) {
        if (set.isEmpty()) {
            throw new IllegalArgumentException("node list '" + nodeList + "' has an empty bracket");
        }
        List<long[]> out = new ArrayList<>();
        for (String range : set.split(",", -1)) {
            int dash = range.indexOf('-');
            String lo = dash < 0 ? range : range.substring(0, dash);
            String hi = dash < 0 ? range : range.substring(dash + 1);
            long from = number(nodeList, lo);
            long to = number(nodeList, hi);
            if (to < from) {
                throw new IllegalArgumentException("node list '" + nodeList + "' has the descending range " + range);
            }
            out.add(new long[] {from, to, lo.length()});
        }
        return out;
    }

    private static long number(String nodeList, String digits) {
        if (digits.isEmpty() || digits.length() > 18 || !digits.chars().allMatch(Character::isDigit)) {
            throw new IllegalArgumentException("node list '" + nodeList + "' has '" + digits
                    + "' where a number was expected");
        }
        return Long.parseLong(digits);
    }
}
