package io.mcore4j.samples.pretrain;

import java.io.Console;

/** A one-line progress bar on an interactive terminal; silent when output is not a terminal. */
final class Progress {
    private static final int WIDTH = 30;

    private Progress() {}

    static void show(long done, long total) {
        Console console = System.console();
        if (console == null) {
            return;
        }
        int filled = (int) (WIDTH * done / Math.max(1, total));
        console.writer().print("\r[" + "#".repeat(filled) + ".".repeat(WIDTH - filled) + "] " + done + "/" + total);
        console.writer().flush();
    }

    static void clear() {
        Console console = System.console();
        if (console != null) {
            console.writer().print("\r" + " ".repeat(WIDTH + 24) + "\r");
            console.writer().flush();
        }
    }
}
