package io.mcore4j.hf;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.types.DataType;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Module;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.transformer.LoraConfig;
import io.mcore4j.parallel.Communicator;
import io.mcore4j.tensorparallel.LoraLinear;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Writes a model held at any layout as a Hugging Face checkpoint directory: {@code config.json}
 * and {@code model.safetensors} (or numbered shard files with {@code model.safetensors.index.json}
 * above {@code maxShardBytes}) in the chosen dtype, bfloat16 by default, converted in Java.
 *
 * <p>Collective over the world group: world rank 0 lays the files out (every rank computes the same
 * layout from the config), a barrier follows, then every rank writes the main replicas of its own
 * pieces straight to their byte ranges with positional writes, so nothing is gathered; after a
 * second barrier rank 0 writes the config and index, and a last barrier lets every rank return with
 * the directory complete. Padded vocabulary rows are dropped.
 *
 * <p>A model with LoRA adapters ({@link LoraLinear}) is written merged: {@link #write} first merges
 * every adapter into its base weight in place ({@link LoraLinear#mergeAll}: {@code W + (alpha/r)·B·A},
 * after which the adapters' {@code B} are zero and the model computes the same function), so the
 * output is a plain Hugging Face checkpoint. {@link #writeAdapter} writes the adapters alone in PEFT's
 * format instead; call it before {@link #write} when both are wanted.
 */
public final class HfExport {
    /** Transformers' default shard size. */
    public static final long DEFAULT_MAX_SHARD_BYTES = 5_000_000_000L;
    private static final long SLAB_VALUES = 1 << 22;

    private HfExport() {}

    /** Where one Hugging Face tensor lives in the output. */
    private record Placement(Path file, HfWeightMap.HfTensor tensor, long begin) {}

    /**
     * Writes the model with the default shard size.
     *
     * @param dir output directory (created; existing model files in it are replaced)
     * @param config the Hugging Face config of the model ({@link HfCheckpoint#config()} of the
     *     checkpoint it was imported from, or {@link HfConfig#forModel})
     * @param chunks this rank's model chunks
     * @param world the world group (barriers); every rank calls this
     * @param dtype the dtype of the written tensors
     * @throws HfCheckpointException if a piece does not match the config or a write fails
     */
    public static void write(Path dir, HfConfig config, List<? extends Module> chunks, Communicator world, HfDtype dtype) {
        write(dir, config, chunks, world, dtype, DEFAULT_MAX_SHARD_BYTES);
    }

    /**
     * Writes the model.
     *
     * @param dir output directory
     * @param config the Hugging Face config of the model
     * @param chunks this rank's model chunks
     * @param world the world group; every rank calls this
     * @param dtype the dtype of the written tensors
     * @param maxShardBytes largest shard file (a tensor larger than this gets a file of its own)
     */
    public static void write(Path dir, HfConfig config, List<? extends Module> chunks, Communicator world, HfDtype dtype,
                             long maxShardBytes) {
        for (Module chunk : chunks) {
            LoraLinear.mergeAll(chunk); // W + (alpha/r)·B·A, local to every rank
        }
        List<ShardedTensor> all = new ArrayList<>();
        for (Module chunk : chunks) {
            all.addAll(chunk.shardedState(""));
        }
        TransformerConfig model = HfWeightMap.withDepthsOf(config.transformerConfig(), all);
        HfWeightMap names = HfWeightMap.of(config.architecture(), model, config.vocabSize(), "transformer.");
        List<List<HfWeightMap.HfTensor>> shards = split(names, dtype, maxShardBytes);
        List<Path> paths = new ArrayList<>();
        for (int i = 0; i < shards.size(); i++) {
            paths.add(dir.resolve(shards.size() == 1 ? "model.safetensors"
                    : String.format(Locale.ROOT, "model-%05d-of-%05d.safetensors", i + 1, shards.size())));
        }
        Map<String, Placement> placements = layOut(dir, shards, paths, dtype, world);
        Map<Path, FileChannel> open = new LinkedHashMap<>();
        try {
            for (Module chunk : chunks) {
                List<ShardedTensor> pieces = chunk.shardedState("");
                HfWeightMap map = HfWeightMap.of(config.architecture(),
                        model.withVocabSize(vocabOf(pieces, config.vocabSize())),
                        config.vocabSize(), "transformer.");
                for (ShardedTensor piece : pieces) {
                    if (piece.isMainReplica() && !LoraLinear.isAdapterKey(piece.key())) {
                        writePiece(piece, plan(map, piece, config), placements, dtype, open);
                    }
                }
            }
        } finally {
            close(open);
        }
        world.barrier();
        if (world.rank() == 0) {
            writeJson(dir, config, dtype, shards, paths);
        }
        world.barrier();
    }

    /**
     * Writes the model's LoRA adapters alone in Hugging Face PEFT's format: {@code adapter_config.json}
     * and {@code adapter_model.safetensors} (float32), keyed as PEFT saves a {@code LoraModel} of a
     * {@code *ForCausalLM} ({@code base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight}, ...),
     * which {@code PeftModel.from_pretrained(base, dir)} loads onto the base model. The fused QKV and
     * gate/up adapters are split exactly ({@link HfWeightMap#adapters}); the target modules become
     * the Hugging Face modules they fuse. Collective over the world group, as {@link #write}.
     *
     * @param dir output directory (created; an existing adapter in it is replaced)
     * @param config the Hugging Face config of the base model
     * @param lora the adapters' settings (rank, alpha, dropout, targets), as the model was built with
     * @param chunks this rank's model chunks, built with those adapters
     * @param world the world group; every rank calls this
     * @throws HfCheckpointException if the architecture has no PEFT mapping here (GPT-2, experts), a
     *     piece does not match, or a write fails
     */
    public static void writeAdapter(Path dir, HfConfig config, LoraConfig lora, List<? extends Module> chunks,
                                    Communicator world) {
        java.util.Set<String> targets = new java.util.LinkedHashSet<>();
        for (LoraConfig.Target t : lora.targetModules()) {
            targets.add(t.moduleName());
        }
        HfWeightMap map = HfWeightMap.adapters(config.architecture(), config.transformerConfig(), lora.dim(), targets);
        HfDtype dtype = HfDtype.F32;
        List<List<HfWeightMap.HfTensor>> shards = List.of(List.copyOf(map.tensors().values()));
        Map<String, Placement> placements = layOut(dir, shards, List.of(dir.resolve("adapter_model.safetensors")),
                dtype, world);
        Map<Path, FileChannel> open = new LinkedHashMap<>();
        try {
            for (Module chunk : chunks) {
                for (ShardedTensor piece : chunk.shardedState("")) {
                    if (piece.isMainReplica() && LoraLinear.isAdapterKey(piece.key())) {
                        HfWeightMap.Plan plan = map.plans().get(piece.key());
                        if (plan == null || !java.util.Arrays.equals(plan.shape(), piece.globalShape())) {
                            throw new HfCheckpointException("adapter \"" + piece.key() + "\" of global shape "
                                    + java.util.Arrays.toString(piece.globalShape()) + " does not match LoRA dim "
                                    + lora.dim() + " and targets " + targets);
                        }
                        writePiece(piece, plan, placements, dtype, open);
                    }
                }
            }
        } finally {
            close(open);
        }
        world.barrier();
        if (world.rank() == 0) {
            writeAdapterConfig(dir, lora, targets);
        }
        world.barrier();
    }

    /** PEFT's names of the Hugging Face modules behind Megatron's targets. */
    private static List<String> peftTargets(java.util.Set<String> targets) {
        List<String> out = new ArrayList<>();
        if (targets.contains("linear_qkv")) {
            out.addAll(List.of("q_proj", "k_proj", "v_proj"));
        }
        if (targets.contains("linear_proj")) {
            out.add("o_proj");
        }
        if (targets.contains("linear_fc1")) {
            out.addAll(List.of("gate_proj", "up_proj"));
        }
        if (targets.contains("linear_fc2")) {
            out.add("down_proj");
        }
        return out;
    }

    private static void writeAdapterConfig(Path dir, LoraConfig lora, java.util.Set<String> targets) {
        JsonObject json = new JsonObject();
        json.addProperty("peft_type", "LORA");
        json.addProperty("task_type", "CAUSAL_LM");
        json.addProperty("r", lora.dim());
        if (lora.alpha() == Math.rint(lora.alpha())) {
            json.addProperty("lora_alpha", (long) lora.alpha());
        } else {
            json.addProperty("lora_alpha", lora.alpha());
        }
        json.addProperty("lora_dropout", lora.dropout());
        JsonArray modules = new JsonArray();
        peftTargets(targets).forEach(modules::add);
        json.add("target_modules", modules);
        json.addProperty("bias", "none");
        json.addProperty("fan_in_fan_out", false);
        json.addProperty("use_rslora", false);
        json.addProperty("use_dora", false);
        json.addProperty("inference_mode", true);
        json.addProperty("init_lora_weights", true);
        try {
            Files.writeString(dir.resolve("adapter_config.json"),
                    new GsonBuilder().setPrettyPrinting().create().toJson(json) + "\n", StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new HfCheckpointException("cannot write adapter_config.json in " + dir + ": " + e, e);
        }
    }

    /**
     * World rank 0 creates the files at their full size with their headers; then a barrier. Every
     * rank computes the same placements.
     */
    private static Map<String, Placement> layOut(Path dir, List<List<HfWeightMap.HfTensor>> shards, List<Path> paths,
                                                 HfDtype dtype, Communicator world) {
        Map<String, Placement> placements = new LinkedHashMap<>();
        List<ByteBuffer> headers = new ArrayList<>();
        for (int i = 0; i < shards.size(); i++) {
            headers.add(header(shards.get(i), dtype, paths.get(i), placements));
        }
        if (world.rank() == 0) {
            try {
                Files.createDirectories(dir);
                Files.deleteIfExists(dir.resolve("model.safetensors.index.json"));
                for (int i = 0; i < paths.size(); i++) {
                    long size = headers.get(i).remaining();
                    for (HfWeightMap.HfTensor t : shards.get(i)) {
                        size += volume(t.shape()) * stored(t, dtype).bytes();
                    }
                    try (RandomAccessFile f = new RandomAccessFile(paths.get(i).toFile(), "rw")) {
                        f.setLength(0);
                        f.setLength(size);
                        f.getChannel().write(headers.get(i).duplicate(), 0);
                    }
                }
            } catch (IOException e) {
                throw new HfCheckpointException("cannot lay out the safetensors files in " + dir + ": " + e, e);
            }
        }
        world.barrier();
        return placements;
    }

    private static void close(Map<Path, FileChannel> open) {
        for (Map.Entry<Path, FileChannel> e : open.entrySet()) {
            try {
                e.getValue().close();
            } catch (IOException ex) {
                throw new HfCheckpointException("cannot close " + e.getKey() + ": " + ex, ex);
            }
        }
    }

    /**
     * Copies the tokenizer and generation files a Hugging Face directory may hold
     * ({@code tokenizer.json}, {@code tokenizer_config.json}, {@code special_tokens_map.json},
     * {@code tokenizer.model}, {@code vocab.json}, {@code merges.txt}, {@code generation_config.json}, and the
     * chat template transformers 5 keeps beside them, {@code chat_template.jinja}) from one directory to another;
     * absent ones are skipped.
     *
     * @param from the source directory (e.g. the imported checkpoint)
     * @param to the exported directory
     * @return the names copied
     * @throws HfCheckpointException if a copy fails
     */
    public static List<String> copyTokenizerFiles(Path from, Path to) {
        List<String> copied = new ArrayList<>();
        for (String name : List.of("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                "tokenizer.model", "vocab.json", "merges.txt", "generation_config.json", "chat_template.jinja")) {
            Path f = from.resolve(name);
            if (Files.isRegularFile(f)) {
                try {
                    Files.createDirectories(to);
                    Files.copy(f, to.resolve(name), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                } catch (IOException e) {
                    throw new HfCheckpointException("cannot copy " + f + " to " + to + ": " + e, e);
                }
                copied.add(name);
            }
        }
        return copied;
    }

    private static HfWeightMap.Plan plan(HfWeightMap map, ShardedTensor piece, HfConfig config) {
        HfWeightMap.Plan plan = map.plans().get(piece.key());
        if (plan == null) {
            throw new HfCheckpointException("model tensor \"" + piece.key() + "\" has no counterpart in "
                    + config.architecture().className());
        }
        if (!java.util.Arrays.equals(plan.shape(), piece.globalShape())) {
            throw new HfCheckpointException("model tensor \"" + piece.key() + "\" has global shape "
                    + java.util.Arrays.toString(piece.globalShape()) + " but the config implies "
                    + java.util.Arrays.toString(plan.shape()));
        }
        return plan;
    }

    private static int vocabOf(List<ShardedTensor> pieces, int fallback) {
        for (ShardedTensor t : pieces) {
            if (t.key().equals("embedding.word_embeddings.weight") || t.key().equals("output_layer.weight")) {
                return (int) t.globalShape()[0];
            }
        }
        return fallback;
    }

    /**
     * The dtype a tensor is written in: the chosen one, but float32 for DeepSeek-V3's {@code e_score_correction_bias},
     * which transformers keeps in float32 whatever the model's dtype ({@code _keep_in_fp32_modules_strict}; mcore4j's
     * expert bias is float32 too), so that a bfloat16 export routes exactly as the model.
     */
    private static HfDtype stored(HfWeightMap.HfTensor t, HfDtype dtype) {
        return t.name().endsWith(".e_score_correction_bias") ? HfDtype.F32 : dtype;
    }

    /** Tensors into files of at most {@code maxBytes} each, in order. */
    private static List<List<HfWeightMap.HfTensor>> split(HfWeightMap names, HfDtype dtype, long maxBytes) {
        List<List<HfWeightMap.HfTensor>> out = new ArrayList<>();
        List<HfWeightMap.HfTensor> current = new ArrayList<>();
        long bytes = 0;
        for (HfWeightMap.HfTensor t : names.tensors().values()) {
            long size = volume(t.shape()) * stored(t, dtype).bytes();
            if (!current.isEmpty() && bytes + size > maxBytes) {
                out.add(current);
                current = new ArrayList<>();
                bytes = 0;
            }
            current.add(t);
            bytes += size;
        }
        out.add(current);
        return out;
    }

    /** The encoded header of one file (8-byte length, JSON padded with spaces to 8 bytes); records placements. */
    private static ByteBuffer header(List<HfWeightMap.HfTensor> tensors, HfDtype dtype, Path file,
                                     Map<String, Placement> placements) {
        JsonObject json = new JsonObject();
        JsonObject meta = new JsonObject();
        meta.addProperty("format", "pt");
        json.add("__metadata__", meta);
        long offset = 0;
        List<long[]> ranges = new ArrayList<>();
        for (HfWeightMap.HfTensor t : tensors) {
            JsonObject e = new JsonObject();
            e.addProperty("dtype", stored(t, dtype).name());
            JsonArray shape = new JsonArray();
            for (long s : t.shape()) {
                shape.add(s);
            }
            e.add("shape", shape);
            long end = offset + volume(t.shape()) * stored(t, dtype).bytes();
            JsonArray range = new JsonArray();
            range.add(offset);
            range.add(end);
            e.add("data_offsets", range);
            json.add(t.name(), e);
            ranges.add(new long[] {offset, end});
            offset = end;
        }
        byte[] text = json.toString().getBytes(StandardCharsets.UTF_8);
        int padded = (text.length + 7) / 8 * 8;
        ByteBuffer out = ByteBuffer.allocate(8 + padded).order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(padded).put(text);
        while (out.hasRemaining()) {
            out.put((byte) ' ');
        }
        out.flip();
        for (int i = 0; i < tensors.size(); i++) {
            placements.put(tensors.get(i).name(), new Placement(file, tensors.get(i), 8 + padded + ranges.get(i)[0]));
        }
        return out;
    }

    /** Writes one piece's rows, slab by slab, to every Hugging Face tensor its rows come from. */
    private static void writePiece(ShardedTensor piece, HfWeightMap.Plan plan, Map<String, Placement> placements,
                                   HfDtype dtype, Map<Path, FileChannel> open) {
        NDArray data = piece.data();
        long[] local = data.getShape().getShape().clone();
        long rows = local[0];
        long columns = local.length == 1 ? 1 : local[1];
        long[] offset = piece.globalOffset();
        long column0 = local.length == 1 ? 0 : offset[1];
        int parts = 1;
        while (rows / parts * columns > SLAB_VALUES && parts < rows) {
            do {
                parts++;
            } while (rows % parts != 0);
        }
        long slabRows = rows / parts;
        for (int p = 0; p < parts; p++) {
            float[] values;
            NDArray slab = parts == 1 ? data : Tensors.chunk(data, 0, parts, p);
            try (NDArray f32 = slab.toType(DataType.FLOAT32, true)) {
                values = f32.toFloatArray();
            } finally {
                if (slab != data) {
                    slab.close();
                }
            }
            long row0 = offset[0] + p * slabRows;
            for (HfWeightMap.Segment s : plan.segments()) {
                long a = Math.max(row0, s.start());
                long b = Math.min(row0 + slabRows, s.start() + s.length());
                if (a >= b || s.hfName() == null) {
                    continue; // vocabulary padding is dropped
                }
                Placement place = placements.get(s.hfName());
                FileChannel channel = open.computeIfAbsent(place.file(), HfExport::openForWrite);
                long[] hfShape = place.tensor().shape();
                long hfColumns = hfShape.length == 1 ? 1 : hfShape[hfShape.length - 1];
                long hfRow = s.hfStart() + (a - s.start());
                int n = (int) (b - a);
                if (!s.transposed()) {
                    int from = (int) ((a - row0) * columns);
                    if (columns == hfColumns) {
                        put(channel, place, values, from, (int) (n * columns), hfRow * hfColumns, dtype);
                    } else {
                        for (int i = 0; i < n; i++) {
                            put(channel, place, values, from + (int) (i * columns), (int) columns,
                                    (hfRow + i) * hfColumns + column0, dtype);
                        }
                    }
                } else {
                    // the stored tensor is [our columns, our rows]: each of our columns is a run of one stored row
                    float[] run = new float[n];
                    for (long j = 0; j < columns; j++) {
                        for (int i = 0; i < n; i++) {
                            run[i] = values[(int) ((a - row0 + i) * columns + j)];
                        }
                        put(channel, place, run, 0, n, (column0 + j) * hfColumns + hfRow, dtype);
                    }
                }
            }
        }
    }

    private static void put(FileChannel channel, Placement place, float[] values, int from, int count, long element,
                            HfDtype dtype) {
        HfDtype d = stored(place.tensor(), dtype);
        ByteBuffer bytes = ByteBuffer.allocate(count * d.bytes());
        d.encode(values, from, count, bytes);
        bytes.flip();
        long at = place.begin() + element * d.bytes();
        try {
            while (bytes.hasRemaining()) {
                at += channel.write(bytes, at);
            }
        } catch (IOException e) {
            throw new HfCheckpointException("cannot write tensor \"" + place.tensor().name() + "\" to " + place.file()
                    + ": " + e, e);
        }
    }

    private static FileChannel openForWrite(Path file) {
        try {
            return FileChannel.open(file, StandardOpenOption.WRITE);
        } catch (IOException e) {
            throw new HfCheckpointException("cannot open " + file + " for writing: " + e, e);
        }
    }

    private static void writeJson(Path dir, HfConfig config, HfDtype dtype, List<List<HfWeightMap.HfTensor>> shards,
                                  List<Path> paths) {
        JsonObject json = config.json();
        json.addProperty("torch_dtype", dtype.torchName());
        if (json.has("dtype")) {
            json.addProperty("dtype", dtype.torchName());
        }
        try {
            Files.writeString(dir.resolve("config.json"),
                    new GsonBuilder().setPrettyPrinting().create().toJson(json) + "\n", StandardCharsets.UTF_8);
            if (shards.size() > 1) {
                JsonObject index = new JsonObject();
                JsonObject meta = new JsonObject();
                long total = 0;
                JsonObject weightMap = new JsonObject();
                for (int i = 0; i < shards.size(); i++) {
                    for (HfWeightMap.HfTensor t : shards.get(i)) {
                        total += volume(t.shape()) * stored(t, dtype).bytes();
                        weightMap.addProperty(t.name(), paths.get(i).getFileName().toString());
                    }
                }
                meta.addProperty("total_size", total);
                index.add("metadata", meta);
                index.add("weight_map", weightMap);
                Files.writeString(dir.resolve("model.safetensors.index.json"),
                        new GsonBuilder().setPrettyPrinting().create().toJson(index) + "\n", StandardCharsets.UTF_8);
            }
        } catch (IOException e) {
            throw new HfCheckpointException("cannot write config.json or the index in " + dir + ": " + e, e);
        }
    }

    private static long volume(long[] shape) {
        long v = 1;
        for (long s : shape) {
            v *= s;
        }
        return v;
    }
}
