package io.mcore4j.hf;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.autograd.AutogradScope;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.tensorparallel.LoraLinear;
import io.mcore4j.models.TransformerConfig;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * A Hugging Face checkpoint directory opened for import: {@code config.json} and either
 * {@code model.safetensors} or {@code model.safetensors.index.json} with its shard files.
 *
 * <p>{@link #open} checks the whole checkpoint against the config before any tensor is read: every
 * tensor the architecture needs is present in an existing file with the shape the config implies,
 * and no tensor is left over (apart from the buffers transformers itself never loads: rotary
 * {@code inv_freq}, GPT-2's attention masks, a tied {@code lm_head} copy, DeepSeek-V3's multi-token-prediction
 * layers). {@link #loadInto} then
 * fills a model built at any layout: each rank reads, with positional reads, only the rows and
 * columns of its own pieces. Nothing is communicated. Close the checkpoint to release its files.
 */
public final class HfCheckpoint implements AutoCloseable {
    /** Values copied per slab; bounds the host memory of one read. */
    private static final long SLAB_VALUES = 1 << 23;

    private final Path dir;
    private final HfConfig config;
    private final Map<String, SafetensorsFile> fileOf;
    private final List<SafetensorsFile> files;
    private final String gpt2Prefix;

    private HfCheckpoint(Path dir, HfConfig config, Map<String, SafetensorsFile> fileOf, List<SafetensorsFile> files,
                         String gpt2Prefix) {
        this.dir = dir;
        this.config = config;
        this.fileOf = fileOf;
        this.files = files;
        this.gpt2Prefix = gpt2Prefix;
    }

    /**
     * Opens and checks a checkpoint directory, understanding every config key or failing.
     *
     * @param dir the directory
     * @return the checkpoint; close it
     * @throws HfCheckpointException naming the file, key or tensor that is missing or does not match
     */
    public static HfCheckpoint open(Path dir) {
        return open(dir, Set.of());
    }

    /**
     * Opens and checks a checkpoint directory.
     *
     * @param dir the directory
     * @param ignoredConfigKeys further {@code config.json} keys the caller knowingly ignores
     * @return the checkpoint; close it
     * @throws HfCheckpointException naming the file, key or tensor that is missing or does not match
     */
    public static HfCheckpoint open(Path dir, Set<String> ignoredConfigKeys) {
        HfConfig config = HfConfig.read(dir, ignoredConfigKeys);
        Map<String, Path> where = weightFiles(dir);
        Map<Path, SafetensorsFile> opened = new LinkedHashMap<>();
        try {
            Map<String, SafetensorsFile> fileOf = new LinkedHashMap<>();
            for (Map.Entry<String, Path> e : where.entrySet()) {
                Path file = e.getValue();
                if (!Files.isRegularFile(file)) {
                    throw new HfCheckpointException("shard file " + file + " (holding tensor \"" + e.getKey()
                            + "\" according to the index) is missing");
                }
                SafetensorsFile f = opened.computeIfAbsent(file, SafetensorsFile::open);
                if (!f.entries().containsKey(e.getKey())) {
                    throw new HfCheckpointException(file + " has no tensor \"" + e.getKey() + "\", which the index places there");
                }
                fileOf.put(e.getKey(), f);
            }
            String prefix = fileOf.containsKey("transformer.wte.weight") ? "transformer." : "";
            HfCheckpoint ck = new HfCheckpoint(dir, config, fileOf, new ArrayList<>(opened.values()), prefix);
            ck.check();
            return ck;
        } catch (RuntimeException e) {
            for (SafetensorsFile f : opened.values()) {
                try {
                    f.close();
                } catch (IOException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    /**
     * Opens and checks a checkpoint directory that a user named (a command-line flag, a program's
     * argument), as {@link #open(Path, Set)} does, reporting every problem with it as bad input.
     *
     * @param name how the user named the directory, e.g. {@code --load-hf}; it starts every message
     * @param dir the directory
     * @param ignoredConfigKeys further {@code config.json} keys the caller knowingly ignores
     * @return the checkpoint; close it
     * @throws IllegalArgumentException {@code NAME DIR does not exist; expected ...} (or {@code is a file},
     *     {@code has no config.json}), or {@code NAME DIR: } and the file, key or tensor that is wrong, the
     *     {@link HfCheckpointException} as its cause
     */
    public static HfCheckpoint openInput(String name, Path dir, Set<String> ignoredConfigKeys) {
        HfConfig.requireDirectory(name, dir);
        try {
            return open(dir, ignoredConfigKeys);
        } catch (HfCheckpointException e) {
            throw HfConfig.badInput(name, dir, e);
        }
    }

    /** Tensor name → file: from the index when there is one, else every tensor of model.safetensors. */
    private static Map<String, Path> weightFiles(Path dir) {
        Path index = dir.resolve("model.safetensors.index.json");
        Path single = dir.resolve("model.safetensors");
        Map<String, Path> out = new TreeMap<>();
        if (Files.isRegularFile(index)) {
            JsonObject map;
            try {
                map = JsonParser.parseString(Files.readString(index, StandardCharsets.UTF_8)).getAsJsonObject()
                        .getAsJsonObject("weight_map");
            } catch (IOException | RuntimeException e) {
                throw new HfCheckpointException(index + " is not a safetensors index with a \"weight_map\": " + e, e);
            }
            if (map == null) {
                throw new HfCheckpointException(index + " has no \"weight_map\"");
            }
            for (Map.Entry<String, JsonElement> e : map.entrySet()) {
                out.put(e.getKey(), dir.resolve(e.getValue().getAsString()));
            }
            return out;
        }
        if (!Files.isRegularFile(single)) {
            throw new HfCheckpointException(dir + " has neither model.safetensors nor model.safetensors.index.json");
        }
        try (SafetensorsFile f = SafetensorsFile.open(single)) {
            for (String name : f.entries().keySet()) {
                out.put(name, single);
            }
        } catch (IOException e) {
            throw new HfCheckpointException("cannot close " + single + ": " + e, e);
        }
        return out;
    }

    /** Every needed tensor present with its configured shape; nothing left over. */
    private void check() {
        HfWeightMap map = weightMap(config.vocabSize());
        for (HfWeightMap.HfTensor t : map.tensors().values()) {
            SafetensorsFile f = fileOf.get(t.name());
            if (f == null) {
                throw new HfCheckpointException(dir + ": tensor \"" + t.name() + "\" that " + config.architecture().className()
                        + " needs is in no file of the checkpoint");
            }
            long[] actual = f.entries().get(t.name()).shape();
            if (!Arrays.equals(actual, t.shape())) {
                throw new HfCheckpointException(f.path() + ": tensor \"" + t.name() + "\" has shape " + Arrays.toString(actual)
                        + " but " + config.file() + " implies " + Arrays.toString(t.shape()));
            }
        }
        for (String name : fileOf.keySet()) {
            if (!map.tensors().containsKey(name) && !isUnloadedBuffer(name)) {
                throw new HfCheckpointException(fileOf.get(name).path() + ": tensor \"" + name + "\" is not part of a "
                        + config.architecture().className() + " with this config");
            }
        }
    }

    private boolean isUnloadedBuffer(String name) {
        return name.endsWith("rotary_emb.inv_freq") || isMultiTokenPredictionLayer(name) || name.endsWith(".attn.bias") && !config.architecture().isLlamaFamily()
                || name.endsWith(".attn.masked_bias")
                || name.equals("lm_head.weight") && config.transformerConfig().tiedEmbeddings();
    }

    /**
     * Whether {@code name} is in one of DeepSeek-V3's multi-token-prediction layers ({@code model.layers.N.*} past the
     * config's layers), which transformers neither builds nor loads.
     */
    private boolean isMultiTokenPredictionLayer(String name) {
        if (config.architecture() != HfArchitecture.DEEPSEEK_V3 || !name.startsWith("model.layers.")) {
            return false;
        }
        String rest = name.substring("model.layers.".length());
        int dot = rest.indexOf('.');
        return dot > 0 && rest.substring(0, dot).chars().allMatch(Character::isDigit)
                && Integer.parseInt(rest.substring(0, dot)) >= config.transformerConfig().numLayers();
    }

    private HfWeightMap weightMap(int vocab) {
        return weightMap(config.transformerConfig(), vocab);
    }

    private HfWeightMap weightMap(TransformerConfig c, int vocab) {
        return HfWeightMap.of(config.architecture(), vocab == c.vocabSize() ? c : c.withVocabSize(vocab),
                config.vocabSize(), gpt2Prefix);
    }

    /** @return the checked config */
    public HfConfig config() {
        return config;
    }

    /**
     * Copies the checkpoint's weights into this rank's model chunks (the chunks of every virtual
     * stage it holds), in place, whatever their layout: each piece of {@link Module#shardedState}
     * (including non-main replicas such as a tied embedding's copy on the last stage) is read from
     * the rows and columns of the Hugging Face tensors it corresponds to. Padded vocabulary rows
     * become zero. Communicates nothing; call it on every rank.
     *
     * @param chunks the rank's model chunks, built from {@link HfConfig#transformerConfig(int, int,
     *     ai.djl.ndarray.types.DataType)} (any dtype, recompute, dropout or sequence parallelism)
     * @throws HfCheckpointException if a piece has no counterpart or a different global shape
     */
    public void loadInto(List<? extends Module> chunks) {
        for (Module chunk : chunks) {
            List<ShardedTensor> pieces = chunk.shardedState("");
            HfWeightMap map = weightMap(HfWeightMap.withDepthsOf(config.transformerConfig(), pieces), vocabOf(pieces));
            for (ShardedTensor piece : pieces) {
                if (LoraLinear.isAdapterKey(piece.key())) {
                    continue; // a LoRA adapter is not part of the base checkpoint: it keeps its initialisation
                }
                HfWeightMap.Plan plan = map.plans().get(piece.key());
                if (plan == null) {
                    throw new HfCheckpointException("model tensor \"" + piece.key() + "\" has no counterpart in a "
                            + config.architecture().className() + " checkpoint (" + dir + ")");
                }
                if (!Arrays.equals(plan.shape(), piece.globalShape())) {
                    throw new HfCheckpointException("model tensor \"" + piece.key() + "\" has global shape "
                            + Arrays.toString(piece.globalShape()) + " but " + config.file() + " implies "
                            + Arrays.toString(plan.shape()) + ": build the model from this checkpoint's config");
                }
                for (HfWeightMap.Segment segment : plan.segments()) {
                    if (segment.hfName() != null && !fileOf.containsKey(segment.hfName())) {
                        // the depths' layers: DeepSeek's checkpoints hold them, transformers' saves do not
                        throw new HfCheckpointException(dir + ": tensor \"" + segment.hfName() + "\" that model tensor \""
                                + piece.key() + "\" needs is in no file of the checkpoint");
                    }
                }
                copy(plan, piece);
            }
        }
    }

    private int vocabOf(List<ShardedTensor> pieces) {
        for (ShardedTensor t : pieces) {
            if (t.key().equals("embedding.word_embeddings.weight") || t.key().equals("output_layer.weight")) {
                return (int) t.globalShape()[0];
            }
        }
        return config.vocabSize();
    }

    /** Fills one piece slab by slab (row ranges of at most {@link #SLAB_VALUES} values). */
    private void copy(HfWeightMap.Plan plan, ShardedTensor piece) {
        NDArray target = piece.data();
        long[] local = target.getShape().getShape().clone();
        long rows = local[0];
        long columns = local.length == 1 ? 1 : local[1];
        int parts = slabCount(rows, columns);
        long[] offset = piece.globalOffset();
        long column0 = local.length == 1 ? 0 : offset[1];
        try (AutogradScope scope = AutogradScope.openNoGrad(target.getManager())) {
            NDManager m = scope.manager();
            long slabRows = rows / parts;
            for (int p = 0; p < parts; p++) {
                float[] values = readRegion(plan, offset[0] + p * slabRows, slabRows, column0, columns);
                long[] shape = local.clone();
                shape[0] = slabRows;
                NDArray source = m.create(values, new Shape(shape));
                if (!source.getDevice().equals(target.getDevice())) {
                    source = source.toDevice(target.getDevice(), false);
                }
                if (parts == 1) {
                    Tensors.copyInto(target, source);
                } else {
                    try (NDArray view = Tensors.chunk(target, 0, parts, p)) {
                        Tensors.copyInto(view, source);
                    }
                }
            }
        }
    }

    /** The smallest number of equal row slabs that keeps each at most {@link #SLAB_VALUES} values. */
    private static int slabCount(long rows, long columns) {
        for (long parts = 1; parts < rows; parts++) {
            if (rows % parts == 0 && rows / parts * columns <= SLAB_VALUES) {
                return (int) parts;
            }
        }
        return (int) Math.max(1, rows);
    }

    /** Rows [row, row + rows) x columns [column, column + columns) of the mcore4j global tensor, row-major float32. */
    float[] readRegion(HfWeightMap.Plan plan, long row, long rows, long column, long columns) {
        float[] out = new float[Math.toIntExact(rows * columns)];
        for (HfWeightMap.Segment s : plan.segments()) {
            long a = Math.max(row, s.start());
            long b = Math.min(row + rows, s.start() + s.length());
            if (a >= b || s.hfName() == null) {
                continue;
            }
            SafetensorsFile f = fileOf.get(s.hfName());
            long hfRow = s.hfStart() + (a - s.start());
            if (!s.transposed()) {
                float[] block = f.read(s.hfName(), hfRow, b - a, column, columns);
                System.arraycopy(block, 0, out, (int) ((a - row) * columns), block.length);
            } else {
                // the stored tensor is [columns, rows]: read its rows [column, column + columns) at our rows' columns
                long n = b - a;
                float[] block = f.read(s.hfName(), column, columns, hfRow, n);
                for (long j = 0; j < columns; j++) {
                    for (long i = 0; i < n; i++) {
                        out[(int) ((a - row + i) * columns + j)] = block[(int) (j * n + i)];
                    }
                }
            }
        }
        return out;
    }

    /** @return the stored dtype of every tensor, by name */
    Map<String, HfDtype> tensorDtypes() {
        Map<String, HfDtype> out = new TreeMap<>();
        fileOf.forEach((name, f) -> out.put(name, f.entries().get(name).dtype()));
        return out;
    }

    /** @return every tensor whole, as float32 (small checkpoints: tests) */
    Map<String, float[]> readAll() {
        Map<String, float[]> out = new TreeMap<>();
        for (String name : fileOf.keySet()) {
            out.put(name, readTensor(name));
        }
        return out;
    }

    /** @return bytes of tensor data this checkpoint object has read (positional reads; headers not counted) */
    long bytesRead() {
        return files.stream().mapToLong(SafetensorsFile::bytesRead).sum();
    }

    /** @return bytes of all tensor data in the checkpoint */
    long tensorBytes() {
        long total = 0;
        for (Map.Entry<String, SafetensorsFile> e : fileOf.entrySet()) {
            SafetensorsFile.Entry t = e.getValue().entries().get(e.getKey());
            total += t.end() - t.begin();
        }
        return total;
    }

    /** @return the names of the checkpoint's tensors, sorted */
    public java.util.SortedSet<String> tensorNames() {
        return new java.util.TreeSet<>(fileOf.keySet());
    }

    /**
     * Reads one tensor whole, as float32 (for checks and small tensors; {@link #loadInto} reads
     * only what a rank needs).
     *
     * @param name the Hugging Face tensor name
     * @return its values, row-major
     * @throws HfCheckpointException if the checkpoint has no such tensor
     */
    public float[] readTensor(String name) {
        SafetensorsFile f = fileOf.get(name);
        if (f == null) {
            throw new HfCheckpointException(dir + " has no tensor \"" + name + "\"");
        }
        SafetensorsFile.Entry e = f.entries().get(name);
        return f.read(name, 0, e.rows(), 0, e.columns());
    }

    /** Closes the checkpoint's files. */
    @Override
    public void close() {
        HfCheckpointException failure = null;
        for (SafetensorsFile f : files) {
            try {
                f.close();
            } catch (IOException e) {
                failure = new HfCheckpointException("cannot close " + f.path() + ": " + e, e);
            }
        }
        if (failure != null) {
            throw failure;
        }
    }
}
