package io.mcore4j.hf;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.core.shard.ShardedTensor;
import io.mcore4j.models.TransformerConfig;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.LoraConfig;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.ProcessGroups;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import io.mcore4j.tensorparallel.LoraLinear;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * LoRA adapters written in PEFT's format ({@link HfExport#writeAdapter}) and merged into a plain
 * checkpoint ({@link HfExport#write}), on the tiny LLaMA and Qwen2 fixtures at TP1 and TP2. The
 * adapters hold values that depend only on their key and global position, so every layout holds the
 * same adapter:
 * <ul>
 * <li>the exported {@code adapter_model.safetensors} equals the committed
 *     {@code hf/<name>-lora/adapter_model.safetensors} bitwise, and its config is PEFT's;
 * <li>mcore4j's logits with the adapters equal those Python {@code peft} computed after
 *     {@code PeftModel.from_pretrained(base, "hf/<name>-lora")} ({@code peft_logits.json}, made by
 *     {@code scripts/hf/make_lora_fixtures.py}) within 1e-5 of their scale;
 * <li>the merged export is {@code W + (alpha/r)·B·A} of the base and the exported adapter.
 * </ul>
 * With {@code -Dmcore4j.writeLoraFixtures=DIR} the TP1 runs copy their adapters to {@code DIR/<name>-lora}
 * (how the committed adapters were made, before the Python script ran on them).
 */
class HfLoraExportTest {
    static final LoraConfig LORA = new LoraConfig(4, 8, 0, LoraConfig.ALL_LINEARS);

    @TempDir
    Path tmp;

    @ParameterizedTest(name = "{0} TP{1}")
    @CsvSource({"llama, 1", "llama, 2", "qwen2, 1", "qwen2, 2"})
    void adapterExportLoadsInPeftAndMergesIntoTheBase(String name, int tp) throws IOException {
        Path base = Fixtures.dir(name);
        Path adapterDir = tmp.resolve("adapter");
        Path merged = tmp.resolve("merged");
        ParallelDims dims = ParallelDims.of(tp, tp, 1);
        int[] prompt = Fixtures.prompt(name);
        List<float[][]> perRank = InJvmWorld.run(tp, rank -> {
            ProcessGroups groups = rank.groups(dims);
            NDManager m = rank.manager();
            try (HfCheckpoint ck = HfCheckpoint.open(base)) {
                TransformerConfig c = ck.config().transformerConfig(Fixtures.VOCAB_DIVISOR, tp, DataType.FLOAT32);
                int[] layers = new int[c.numLayers()];
                for (int i = 0; i < layers.length; i++) {
                    layers[i] = i;
                }
                GptModel model = GptModel.build(ModelContext.create(c, groups, m, new SeedScheme(7)),
                        LayerSpec.tensorParallel().withLora(LORA), layers, true, true);
                ck.loadInto(List.of(model));
                fillAdapters(model, m);
                float[][] logits = Fixtures.forward(model, c, groups, m, prompt, ck.config().vocabSize());
                HfExport.writeAdapter(adapterDir, ck.config(), LORA, List.of(model), groups.world());
                HfExport.write(merged, ck.config(), List.of(model), groups.world(), HfDtype.F32);
                float[][] after = Fixtures.forward(model, c, groups, m, prompt, ck.config().vocabSize());
                assertTrue(Fixtures.relativeError(after, logits) <= 1e-5, "merging changed the model's function");
                model.close();
                return logits;
            }
        });
        float[][] logits = perRank.get(0);
        Path committed = Path.of("src", "test", "resources", "hf", name + "-lora");
        String writeTo = System.getProperty("mcore4j.writeLoraFixtures");
        if (writeTo != null && tp == 1) {
            Path out = Path.of(writeTo).resolve(name + "-lora");
            Files.createDirectories(out);
            for (String f : List.of("adapter_config.json", "adapter_model.safetensors")) {
                Files.copy(adapterDir.resolve(f), out.resolve(f), StandardCopyOption.REPLACE_EXISTING);
            }
            return;
        }
        Map<String, float[]> exported = readAll(adapterDir.resolve("adapter_model.safetensors"));
        Map<String, float[]> expected = readAll(committed.resolve("adapter_model.safetensors"));
        assertEquals(expected.keySet(), exported.keySet());
        for (String key : expected.keySet()) {
            assertArrayEquals(expected.get(key), exported.get(key), key);
        }
        assertTrue(exported.containsKey("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"), exported.keySet().toString());
        JsonObject config = JsonParser.parseString(Files.readString(adapterDir.resolve("adapter_config.json"),
                StandardCharsets.UTF_8)).getAsJsonObject();
        assertEquals("LORA", config.get("peft_type").getAsString());
        assertEquals(4, config.get("r").getAsInt());
        assertEquals(8, config.get("lora_alpha").getAsInt());
        assertEquals(List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                config.getAsJsonArray("target_modules").asList().stream().map(e -> e.getAsString()).toList());

        float[][] peft = peftLogits(committed);
        double error = Fixtures.relativeError(logits, peft);
        assertTrue(error <= 1e-5, name + " TP" + tp + ": logits differ from peft's by " + error + " of their scale");

        // the merged export: W + (alpha/r)·B·A, tensor by tensor
        Map<String, float[]> baseTensors;
        Map<String, float[]> mergedTensors;
        try (HfCheckpoint b = HfCheckpoint.open(base); HfCheckpoint mc = HfCheckpoint.open(merged)) {
            baseTensors = b.readAll();
            mergedTensors = mc.readAll();
        }
        assertEquals(baseTensors.keySet(), mergedTensors.keySet());
        int changed = 0;
        for (String key : baseTensors.keySet()) {
            String module = key.replace("model.layers.", "base_model.model.model.layers.").replace(".weight", "");
            float[] a = exported.get(module + ".lora_A.weight");
            float[] w = baseTensors.get(key);
            float[] want = w;
            if (a != null) {
                float[] bw = exported.get(module + ".lora_B.weight");
                int r = LORA.dim();
                int in = a.length / r;
                int out = bw.length / r;
                want = new float[w.length];
                for (int i = 0; i < out; i++) {
                    for (int j = 0; j < in; j++) {
                        double d = 0;
                        for (int k = 0; k < r; k++) {
                            d += (double) bw[i * r + k] * a[k * in + j];
                        }
                        want[i * in + j] = (float) (w[i * in + j] + LORA.scaling() * d);
                    }
                }
                changed++;
            }
            float[] got = mergedTensors.get(key);
            for (int i = 0; i < want.length; i++) {
                assertEquals(want[i], got[i], 1e-5 * (1 + Math.abs(want[i])), key + "[" + i + "]");
            }
        }
        assertEquals(2 * 7, changed, "every targeted Hugging Face module of both layers is merged");
    }

    /**
     * Sets every adapter element from its key and global position: {@code 0.05·sin(...)}, the same at
     * every layout.
     */
    static void fillAdapters(GptModel model, NDManager m) {
        for (ShardedTensor piece : model.shardedState("")) {
            if (!LoraLinear.isAdapterKey(piece.key())) {
                continue;
            }
            long[] local = piece.data().getShape().getShape();
            long[] global = piece.globalShape();
            float[] values = new float[(int) (local[0] * local[1])];
            int salt = piece.key().hashCode() % 1000;
            for (int i = 0; i < local[0]; i++) {
                for (int j = 0; j < local[1]; j++) {
                    long row = piece.globalOffset()[0] + i;
                    long col = piece.globalOffset()[1] + j;
                    values[(int) (i * local[1] + j)] = (float) (0.05 * Math.sin(salt + 0.37 * (row * global[1] + col)));
                }
            }
            try (NDManager temp = m.newSubManager()) {
                NDArray source = temp.create(values, new Shape(local)).toType(piece.data().getDataType(), false);
                Tensors.copyInto(piece.data(), source);
            }
        }
    }

    private static Map<String, float[]> readAll(Path file) throws IOException {
        Map<String, float[]> out = new TreeMap<>();
        try (SafetensorsFile f = SafetensorsFile.open(file)) {
            for (SafetensorsFile.Entry e : f.entries().values()) {
                long rows = e.shape()[0];
                long columns = e.shape().length == 1 ? 1 : e.shape()[1];
                out.put(e.name(), f.read(e.name(), 0, rows, 0, columns));
            }
        }
        return out;
    }

    private static float[][] peftLogits(Path dir) throws IOException {
        return Fixtures.floatRows(JsonParser.parseString(Files.readString(dir.resolve("peft_logits.json"),
                StandardCharsets.UTF_8)).getAsJsonObject().getAsJsonArray("logits"));
    }
}
