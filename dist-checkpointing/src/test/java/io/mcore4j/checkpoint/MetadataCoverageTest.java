package io.mcore4j.checkpoint;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import io.mcore4j.checkpoint.json.Json;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.stream.Stream;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A {@code metadata.json} whose shards do not cover a tensor exactly once is refused at load, on
 * every rank and at every layout a load reshards to, naming the file, the tensor and the missing or
 * doubled range: a shard entry removed, doubled, moved onto another's offset, grown into a
 * neighbour, shrunk, or a tensor's list emptied, for model tensors split along either dim and for
 * flat optimizer state split evenly or not. Before these checks such a checkpoint loaded
 * silently, leaving whatever the target held where the missing piece should have been.
 */
class MetadataCoverageTest {
    /** The saved tensors: key, global shape, and how rank r of 4 cuts it (offset, shape). */
    private record Stored(String key, long[] shape, long[][] offsets, long[][] shapes) {
        /** The dim along which the first two shards follow each other. */
        int splitDim() {
            int d = 0;
            while (offsets[0][d] == offsets[1][d]) {
                d++;
            }
            return d;
        }
    }

    private static final List<Stored> STORED = List.of(
            new Stored("model.linear.weight", new long[] {8, 6},
                    new long[][] {{0, 0}, {2, 0}, {4, 0}, {6, 0}}, new long[][] {{2, 6}, {2, 6}, {2, 6}, {2, 6}}),
            new Stored("model.proj.weight", new long[] {4, 6},
                    new long[][] {{0, 0}, {0, 3}, {2, 0}, {2, 3}}, new long[][] {{2, 3}, {2, 3}, {2, 3}, {2, 3}}),
            new Stored("optimizer.fp32_param", new long[] {24},
                    new long[][] {{0}, {6}, {12}, {18}}, new long[][] {{6}, {6}, {6}, {6}}),
            new Stored("optimizer.exp_avg", new long[] {24},
                    new long[][] {{0}, {5}, {12}, {20}}, new long[][] {{5}, {7}, {8}, {4}}));

    @TempDir
    static Path dir;
    private static String intact;

    @BeforeAll
    static void saveOnFourRanks() throws IOException {
        InJvmWorld.run(4, rank -> {
            NDManager m = rank.manager();
            List<ShardedTensor> state = new ArrayList<>();
            int r = rank.rank();
            for (Stored s : STORED) {
                state.add(Blocks.shard(m, s.key(), s.shape(), s.offsets()[r], s.shapes()[r], 0));
            }
            DistCheckpointing.save(dir, state, null, rank.groups(ParallelDims.of(4, 1, 1)).world());
            return null;
        });
        intact = Files.readString(dir.resolve(CheckpointMetadata.FILE_NAME));
    }

    /** A layout to load at: ranks, and the dim each tensor is split along (clamped to its last dim). */
    private record Layout(String name, int ranks, int dim) {}

    private static final List<Layout> LAYOUTS = List.of(new Layout("1 rank", 1, 0),
            new Layout("2 ranks by rows", 2, 0), new Layout("2 ranks by columns", 2, 1), new Layout("4 ranks", 4, 0));

    /** Loads every tensor at {@code layout}; returns each rank's failure (null where it loaded). */
    private static List<Throwable> load(Layout layout, boolean checkValues) {
        return InJvmWorld.run(layout.ranks(), rank -> {
            List<ShardedTensor> targets = new ArrayList<>();
            for (Stored s : STORED) {
                int d = Math.min(layout.dim(), s.shape().length - 1);
                long part = s.shape()[d] / layout.ranks();
                long[] shape = s.shape().clone();
                shape[d] = part;
                targets.add(Blocks.target(rank.manager(), s.key(), s.shape(),
                        Blocks.along(s.shape().length, d, part * rank.rank()), shape));
            }
            try {
                DistCheckpointing.load(dir, targets, rank.groups(ParallelDims.of(layout.ranks(), 1, 1)).world(),
                        StrictMode.RAISE_ALL);
            } catch (CheckpointException e) {
                return e;
            }
            if (checkValues) {
                targets.forEach(Blocks::assertHoldsOriginal);
            }
            return null;
        });
    }

    @Test
    void theIntactCheckpointLoadsAtEveryLayout() throws IOException {
        Files.writeString(dir.resolve(CheckpointMetadata.FILE_NAME), intact);
        for (Layout layout : LAYOUTS) {
            for (Throwable t : load(layout, true)) {
                if (t != null) {
                    throw new AssertionError(layout.name() + ": " + t, t);
                }
            }
        }
    }

    /** A named edit of the parsed metadata, and words the refusal must contain besides the file and key. */
    private record Damage(String name, String key, Consumer<List<Map<String, Object>>> edit, List<String> words) {
        @Override
        public String toString() {
            return name;
        }
    }

    static Stream<Arguments> damages() {
        List<Arguments> out = new ArrayList<>();
        for (Stored s : STORED) {
            for (int i = 0; i < 4; i++) {
                int at = i;
                Box removed = new Box(s.offsets()[i], s.shapes()[i]);
                out.add(Arguments.of(new Damage(s.key() + ": shard " + i + " removed", s.key(),
                        shards -> shards.remove(at), List.of("elements " + removed + " lie in no shard"))));
            }
            out.add(Arguments.of(new Damage(s.key() + ": a shard listed twice", s.key(),
                    shards -> shards.add(2, new LinkedHashMap<>(shards.get(1))), List.of("reads too"))));
            out.add(Arguments.of(new Damage(s.key() + ": two shards at the same offset", s.key(),
                    shards -> shards.get(2).put("offset", shards.get(1).get("offset")), List.of("both hold elements"))));
            int d = s.splitDim();
            out.add(Arguments.of(new Damage(s.key() + ": a shard grown into its neighbour", s.key(),
                    shards -> grow(shards.get(0), d, 1), List.of("both hold elements"))));
            out.add(Arguments.of(new Damage(s.key() + ": the last shard shrunk", s.key(),
                    shards -> grow(shards.get(3), d, -1), List.of("lie in no shard"))));
            out.add(Arguments.of(new Damage(s.key() + ": the last shard grown past the end", s.key(),
                    shards -> grow(shards.get(3), d, 1), List.of("lies outside the global shape"))));
            out.add(Arguments.of(new Damage(s.key() + ": no shards at all", s.key(), List::clear,
                    List.of("elements " + new Box(new long[s.shape().length], s.shape()) + " lie in no shard"))));
        }
        return out.stream();
    }

    /** Changes the extent of a shard along {@code dim} by {@code by}. */
    @SuppressWarnings("unchecked")
    private static void grow(Map<String, Object> shard, int dim, long by) {
        List<Object> shape = new ArrayList<>((List<Object>) shard.get("shape"));
        shape.set(dim, (Long) shape.get(dim) + by);
        shard.put("shape", shape);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("damages")
    @SuppressWarnings("unchecked")
    void aDamagedListOfShardsIsRefusedAtEveryLayout(Damage damage) throws IOException {
        Map<String, Object> root = (Map<String, Object>) Json.parse(intact);
        Map<String, Object> tensor = (Map<String, Object>) ((Map<String, Object>) root.get("tensors")).get(damage.key());
        List<Map<String, Object>> shards = new ArrayList<>();
        for (Object s : (List<Object>) tensor.get("shards")) {
            shards.add(new LinkedHashMap<>((Map<String, Object>) s));
        }
        damage.edit().accept(shards);
        tensor.put("shards", shards);
        Path metadata = dir.resolve(CheckpointMetadata.FILE_NAME);
        Files.writeString(metadata, Json.writePretty(root), StandardCharsets.UTF_8);
        try {
            for (Layout layout : LAYOUTS) {
                List<Throwable> failures = load(layout, false);
                for (int r = 0; r < failures.size(); r++) {
                    Throwable t = failures.get(r);
                    String where = damage + ", loaded at " + layout.name() + ", rank " + r;
                    assertInstanceOf(CorruptCheckpointException.class, t, where + " loaded without a word");
                    List<String> words = new ArrayList<>(damage.words());
                    words.add(metadata.toString());
                    words.add(damage.key());
                    for (String w : words) {
                        assertTrue(t.getMessage().contains(w), where + ": the message lacks \"" + w + "\": "
                                + t.getMessage());
                    }
                }
            }
        } finally {
            Files.writeString(metadata, intact, StandardCharsets.UTF_8);
        }
    }
}
