package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.types.DataType;
import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32C;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The files on disk, read back by hand as a Python safetensors reader would: 8-byte little-endian
 * header length, JSON header with dtype, shape and data offsets, raw little-endian data. And
 * {@code mcore4j_metadata.json}'s sizes and CRC32C values match the files.
 */
class SafetensorsFormatTest {
    @TempDir
    Path dir;

    @Test
    void shardFilesAreSafetensorsAndMetadataDescribesThem() throws Exception {
        long[] shape = {3, 10};
        InJvmWorld.run(2, rank -> {
            int r = rank.rank();
            DistCheckpointing.save(dir, List.of(
                    Blocks.shard(rank.manager(), "layer.weight", shape, new long[] {0, 5L * r}, new long[] {3, 5}, 0),
                    Blocks.shard(rank.manager(), "layer.bias", new long[] {10}, new long[] {5L * r}, new long[] {5}, 0,
                            DataType.FLOAT16),
                    Blocks.shard(rank.manager(), "step", new long[0], new long[0], new long[0], r, DataType.INT64)),
                    Map.of("iteration", 3L), rank.groups(ParallelDims.of(2, 1, 1)).world());
            return null;
        });

        byte[] file = Files.readAllBytes(dir.resolve("rank_00001.safetensors"));
        ByteBuffer bytes = ByteBuffer.wrap(file).order(ByteOrder.LITTLE_ENDIAN);
        long headerLength = bytes.getLong(0);
        assertEquals(0, (8 + headerLength) % 8, "data starts 8-byte aligned");
        Map<?, ?> header = (Map<?, ?>) Json.parse(new String(file, 8, (int) headerLength, StandardCharsets.UTF_8).trim());
        assertEquals(Map.of("format", "pt", "producer", "mcore4j", "mcore4j_format_version", "1"), header.get("__metadata__"));
        assertEquals(List.of("__metadata__", "layer.bias@5", "layer.weight@0,5"), header.keySet().stream().sorted().toList(),
                "rank 1 is not the main replica of step");

        Map<?, ?> weight = (Map<?, ?>) header.get("layer.weight@0,5");
        assertEquals("F32", weight.get("dtype"));
        assertEquals(List.of(3L, 5L), weight.get("shape"));
        List<?> offsets = (List<?>) weight.get("data_offsets");
        int begin = (int) (8 + headerLength + (Long) offsets.get(0));
        float[] stored = new float[15];
        for (int i = 0; i < 15; i++) {
            stored[i] = bytes.getFloat(begin + 4 * i);
        }
        assertArrayEquals(Blocks.block("layer.weight", shape, new long[] {0, 5}, new long[] {3, 5}), stored);
        Map<?, ?> bias = (Map<?, ?>) header.get("layer.bias@5");
        assertEquals("F16", bias.get("dtype"));
        assertEquals(List.of(0L, 10L), bias.get("data_offsets"), "tensors are packed in name order from offset 0");
        assertEquals(List.of(10L, 70L), weight.get("data_offsets"));
        assertEquals(file.length, 8 + headerLength + 70);

        String metadataText = Files.readString(dir.resolve(CheckpointMetadata.FILE_NAME));
        Map<?, ?> metadata = (Map<?, ?>) Json.parse(metadataText);
        assertEquals("mcore4j-dist-checkpoint", metadata.get("format"));
        assertEquals(1L, metadata.get("version"));
        assertEquals(Map.of("iteration", 3L), metadata.get("common"));
        for (String name : List.of("rank_00000.safetensors", "rank_00001.safetensors")) {
            byte[] content = Files.readAllBytes(dir.resolve(name));
            CRC32C crc = new CRC32C();
            crc.update(content);
            assertEquals(Map.of("size", (long) content.length, "crc32c", String.format("%08x", crc.getValue())),
                    ((Map<?, ?>) metadata.get("files")).get(name));
        }
        Map<?, ?> step = (Map<?, ?>) ((Map<?, ?>) metadata.get("tensors")).get("step");
        assertEquals(Map.of("dtype", "I64", "shape", List.of(), "shards", List.of(Map.of("file", "rank_00000.safetensors",
                "name", "step", "offset", List.of(), "shape", List.of()))), step);
        Map<?, ?> w = (Map<?, ?>) ((Map<?, ?>) metadata.get("tensors")).get("layer.weight");
        assertEquals(List.of(Map.of("file", "rank_00000.safetensors", "name", "layer.weight@0,0", "offset", List.of(0L, 0L),
                        "shape", List.of(3L, 5L)),
                Map.of("file", "rank_00001.safetensors", "name", "layer.weight@0,5", "offset", List.of(0L, 5L),
                        "shape", List.of(3L, 5L))), w.get("shards"));
        assertTrue(metadataText.endsWith("}\n") && !metadataText.contains("time"), metadataText);
        assertTrue(Arrays.stream(dir.toFile().list()).noneMatch(n -> n.endsWith(".tmp")));
    }
}
