package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertEquals;

import ai.djl.ndarray.NDManager;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.core.testing.NativeArrays;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Repeated saves (sync and async) and resharding loads leave no native arrays behind in the caller's managers. */
class NativeMemoryTest {
    @TempDir
    Path root;

    @Test
    void repeatedSavesAndLoadsDoNotGrowTheLiveArrayCount() {
        InJvmWorld.run(2, rank -> {
            Communicator world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            NDManager m = rank.manager();
            long[] shape = {4, 6, 10};
            int r = rank.rank();
            List<ShardedTensor> state = List.of(
                    Blocks.shard(m, "w", shape, new long[] {2L * r, 0, 0}, new long[] {2, 6, 10}, 0),
                    Blocks.shard(m, "b", new long[] {10}, new long[1], new long[] {10}, r));
            List<ShardedTensor> targets = List.of(
                    Blocks.target(m, "w", shape, new long[] {0, 3L * r, 1}, new long[] {4, 3, 7}),
                    Blocks.target(m, "b", new long[] {10}, new long[] {5L * r}, new long[] {5}));
            int before = -1;
            for (int step = 0; step < 6; step++) {
                Path dir = root.resolve("step" + step);
                if (step % 2 == 0) {
                    DistCheckpointing.save(dir, state, Map.of("step", (long) step), world);
                } else {
                    DistCheckpointing.saveAsync(dir, state, Map.of("step", (long) step), world).finish();
                }
                DistCheckpointing.load(dir, targets, world, StrictMode.RAISE_ALL);
                if (step == 0) {
                    before = NativeArrays.live(m);
                }
            }
            assertEquals(before, NativeArrays.live(m), "live native arrays of rank " + r);
            targets.forEach(Blocks::assertHoldsOriginal);
            return null;
        });
    }
}
