package io.mcore4j.checkpoint;

import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Child-process body of {@link CrashSafetyTest}: two in-JVM ranks save checkpoint A (iteration 1)
 * through a {@link CheckpointManager}, then start checkpoint B (iteration 2), and the JVM halts
 * while rank 1 is half-way through writing its shard file of B.
 */
public final class CrashingSave {
    /** Exit status that proves the halt happened where planned. */
    static final int HALTED = 77;
    static final long[] SHAPE = {8, 4096};

    private CrashingSave() {}

    /**
     * @param args the checkpoint root
     */
    public static void main(String[] args) {
        Path root = Path.of(args[0]);
        InJvmWorld.run(2, rank -> {
            CheckpointManager manager = new CheckpointManager(root, 3);
            var world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            manager.save(1, state(rank, "A"), Map.of("iteration", 1L, "name", "A"), world);
            SaveOptions haltHalfWay = SaveOptions.defaults().withWriteChunkBytes(4096).withListener((file, written, total) -> {
                if (rank.rank() == 1 && written >= total / 2) {
                    Runtime.getRuntime().halt(HALTED);
                }
            });
            manager.save(2, state(rank, "B"), Map.of("iteration", 2L, "name", "B"), world, haltHalfWay);
            return null;
        });
        System.exit(1); // not reached when the halt fires
    }

    /** Rank r's half (rows 4r to 4r+3) of tensor "w", with the values of global tensor {@code name}. */
    static List<ShardedTensor> state(InJvmWorld.Rank rank, String name) {
        long[] offset = {4L * rank.rank(), 0};
        ShardedTensor values = Blocks.shard(rank.manager(), name, SHAPE, offset, new long[] {4, SHAPE[1]}, 0);
        return List.of(new ShardedTensor("w", values.data(), SHAPE, offset, 0));
    }
}
