package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.Device;
import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import io.mcore4j.core.DataTypes;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * bfloat16 tensors are stored as safetensors {@code BF16} and come back bit for bit, also when the
 * load reshards them (row halves saved, column halves loaded) and into parameters that require grad.
 */
class BFloat16CheckpointTest {
    private static final long ROWS = 8;
    private static final long COLS = 6;

    @TempDir
    Path dir;

    /** Every bfloat16 bit pattern but NaNs is fair game: 48 of them, row-major [8, 6], little-endian. */
    private static byte[] globalBits() {
        SplittableRandom random = new SplittableRandom(42);
        ByteBuffer out = ByteBuffer.allocate((int) (2 * ROWS * COLS)).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < ROWS * COLS; i++) {
            short s;
            do {
                s = (short) random.nextInt(1 << 16);
            } while ((s & 0x7F80) == 0x7F80 && (s & 0x007F) != 0);
            out.putShort(s);
        }
        return out.array();
    }

    /** The bytes of the block [rows r0..r1) x [cols c0..c1) of the global tensor. */
    private static byte[] block(byte[] global, long r0, long r1, long c0, long c1) {
        ByteBuffer out = ByteBuffer.allocate((int) (2 * (r1 - r0) * (c1 - c0)));
        for (long r = r0; r < r1; r++) {
            out.put(global, (int) (2 * (r * COLS + c0)), (int) (2 * (c1 - c0)));
        }
        return out.array();
    }

    @Test
    void bfloat16StateRoundTripsBitForBitAcrossLayouts() throws IOException {
        byte[] global = globalBits();
        InJvmWorld.run(2, rank -> {
            NDManager m = rank.manager();
            var world = rank.groups(ParallelDims.of(2, 1, 1)).world();
            int r = world.rank();
            // saved: row halves, one a bfloat16 parameter that requires grad
            NDArray rows = DataTypes.fromBytes(m, ByteBuffer.wrap(block(global, r * ROWS / 2, (r + 1) * ROWS / 2, 0, COLS)),
                    new Shape(ROWS / 2, COLS), DataType.BFLOAT16, Device.cpu());
            rows.setRequiresGradient(true);
            DistCheckpointing.save(dir, List.of(ShardedTensor.partitioned("w", rows, 0, r, 2)), null, world);

            // loaded: column halves into fresh bfloat16 parameters
            NDArray cols = DataTypes.zeros(m, new Shape(ROWS, COLS / 2), DataType.BFLOAT16);
            cols.setRequiresGradient(true);
            DistCheckpointing.load(dir, List.of(ShardedTensor.partitioned("w", cols, 1, r, 2)), world, StrictMode.RAISE_ALL);
            assertEquals(DataType.BFLOAT16, DataTypes.of(cols));
            assertTrue(Tensors.requiresGrad(cols), "loading keeps the parameter a leaf that requires grad");
            assertArrayEquals(block(global, 0, ROWS, r * COLS / 2, (r + 1) * COLS / 2), DataTypes.toBytes(cols),
                    "rank " + r + "'s column half, bit for bit");
            return null;
        });
        // the shard files declare BF16
        try (Stream<Path> files = Files.list(dir)) {
            List<Path> shards = files.filter(p -> p.getFileName().toString().endsWith(".safetensors")).toList();
            assertEquals(2, shards.size(), shards.toString());
            for (Path p : shards) {
                byte[] bytes = Files.readAllBytes(p);
                long headerLength = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
                String header = new String(bytes, 8, (int) headerLength, StandardCharsets.UTF_8);
                assertTrue(header.contains("\"BF16\""), header);
            }
        }
    }
}
