package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.junit.jupiter.api.Test;

/**
 * A freshly loaded module's first calls from several threads at once (in-JVM ranks sharing one module, as the ring
 * attention's kernel is shared): DJL initialises a block on its first training call without a lock, and two threads
 * doing so together corrupted its input list (an ArrayIndexOutOfBoundsException in {@code MemoryModelCpuTest}'s
 * context-parallel probe, once in CI). A module is initialised on loading, so no call initialises it.
 */
class TorchScriptModuleConcurrencyTest {
    @Test
    void firstCallsFromManyThreadsAtOnceAllSucceed() throws Exception {
        int threads = 8;
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try (NDManager owner = NDManager.newBaseManager()) {
            for (int round = 0; round < 20; round++) {
                TorchScriptModule module = TorchScriptModules.load(owner, BFloat16Bridge.class, BFloat16Bridge.RESOURCE);
                assertTrue(module.initialized(), "initialised on loading, before any call");
                CyclicBarrier start = new CyclicBarrier(threads);
                List<Future<Integer>> calls = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    calls.add(pool.submit(() -> {
                        try (NDManager m = owner.newSubManager()) {
                            NDArray x = m.ones(new Shape(3));
                            start.await();
                            NDList out = module.forward(new NDList(x));
                            return (int) out.singletonOrThrow().getShape().size();
                        }
                    }));
                }
                for (Future<Integer> f : calls) {
                    assertEquals(3, f.get(), "round " + round);
                }
            }
        } finally {
            pool.shutdownNow();
        }
    }
}
