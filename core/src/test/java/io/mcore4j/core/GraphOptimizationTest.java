package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

import org.junit.jupiter.api.Test;

/** The per-thread setting's handle: the default it restores, and that only its own thread may restore it. */
class GraphOptimizationTest {
    @Test
    void restoresTheThreadDefaultOnItsOwnThreadOnly() throws InterruptedException, ExecutionException {
        String property = System.getProperty(GraphOptimization.DJL_PROPERTY);
        assertEquals(property == null || Boolean.parseBoolean(property), GraphOptimization.threadDefault());
        assertEquals(property != null, GraphOptimization.overriddenByProperty());
        GraphOptimization off = GraphOptimization.set(false);
        try {
            Throwable elsewhere = CompletableFuture.supplyAsync(() -> {
                try {
                    off.close();
                    return null;
                } catch (IllegalStateException e) {
                    return e;
                }
            }).get();
            assertTrue(elsewhere instanceof IllegalStateException, "closed on another thread: " + elsewhere);
        } finally {
            off.close();
        }
        GraphOptimization.set(true).close();
    }
}
