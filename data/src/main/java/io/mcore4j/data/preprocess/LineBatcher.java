package io.mcore4j.data.preprocess;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Cuts a byte stream into batches of lines without decoding them, so that decoding runs on the workers.
 * Lines end at {@code \n}; a trailing {@code \r} and a UTF-8 byte-order mark at the start of the input are
 * removed. Not thread-safe.
 */
final class LineBatcher {
    /** A run of consecutive lines; {@code bytes} counts them with their line ends. */
    record Batch(long firstLine, List<byte[]> lines, long bytes) {}

    private static final int MAX_BATCH_BYTES = 4 << 20;

    private final InputStream in;
    private final int maxLines;
    private final byte[] chunk = new byte[1 << 16];
    private int chunkPos;
    private int chunkEnd;
    private long nextLine = 1;
    private boolean atStart = true;
    private boolean eof;
    private long consumed;
    private byte[] pending = new byte[256];

    LineBatcher(InputStream in, int maxLines) {
        this.in = in;
        this.maxLines = maxLines;
    }

    /** The next batch, or null at the end of the input. */
    Batch next() throws IOException {
        List<byte[]> lines = new ArrayList<>();
        long bytes = 0;
        long first = nextLine;
        while (lines.size() < maxLines && bytes < MAX_BATCH_BYTES) {
            long before = consumed;
            byte[] line = readLine();
            if (line == null) {
                break;
            }
            lines.add(line);
            bytes += consumed - before;
            nextLine++;
        }
        return lines.isEmpty() ? null : new Batch(first, lines, bytes);
    }

    private byte[] readLine() throws IOException {
        int length = 0;
        boolean any = false;
        while (true) {
            if (chunkPos == chunkEnd) {
                if (eof || !fill()) {
                    return any ? finish(length) : null;
                }
            }
            any = true;
            int start = chunkPos;
            while (chunkPos < chunkEnd && chunk[chunkPos] != '\n') {
                chunkPos++;
            }
            int n = chunkPos - start;
            if (length + n > pending.length) {
                pending = Arrays.copyOf(pending, Math.max(pending.length * 2, length + n));
            }
            System.arraycopy(chunk, start, pending, length, n);
            length += n;
            consumed += n;
            if (chunkPos < chunkEnd) {
                chunkPos++;
                consumed++;
                return finish(length);
            }
        }
    }

    private boolean fill() throws IOException {
        int n = in.read(chunk);
        if (n <= 0) {
            eof = true;
            return false;
        }
        chunkPos = 0;
        chunkEnd = n;
        if (atStart) {
            atStart = false;
            if (n >= 3 && (chunk[0] & 0xFF) == 0xEF && (chunk[1] & 0xFF) == 0xBB && (chunk[2] & 0xFF) == 0xBF) {
                chunkPos = 3;
                consumed += 3;
            }
        }
        return true;
    }

    private byte[] finish(int length) {
        if (length > 0 && pending[length - 1] == '\r') {
            length--;
        }
        return Arrays.copyOf(pending, length);
    }
}
