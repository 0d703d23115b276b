package io.mcore4j.samples.generate;

import ai.djl.ndarray.types.DataType;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.nn.Parameter;
import io.mcore4j.core.random.SeedScheme;
import io.mcore4j.models.gpt.GptModel;
import io.mcore4j.models.transformer.LayerSpec;
import io.mcore4j.models.transformer.ModelContext;
import io.mcore4j.parallel.ParallelDims;
import io.mcore4j.parallel.inprocess.InJvmWorld;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The generation benchmark at tensor-parallel size 2 (ranks in this JVM) loads its part of each whole tensor of the
 * weights file and generates exactly the single rank's greedy ids, through {@code Generator} and through the
 * continuous-batching engine.
 */
class GenerateBenchmarkTest {
    private static final List<String> SHAPE = List.of("--num-layers", "2", "--hidden-size", "64", "--num-attention-heads",
            "4", "--num-query-groups", "2", "--ffn-hidden-size", "128", "--vocab-size", "256", "--seq-length", "64", "--fp32");

    @TempDir
    Path dir;

    @Test
    void tensorParallelRanksGenerateTheSingleRanksIds() throws Exception {
        Path weights = dir.resolve("weights.safetensors");
        Path prompts = dir.resolve("prompts.json");
        Files.writeString(prompts, "[[5, 17, 99, 3, 250, 42, 7, 64], [1, 2, 3, 4, 5, 6, 7, 8]]");
        List<String> required = new ArrayList<>(List.of("--weights", weights.toString(), "--prompts", prompts.toString()));
        required.addAll(SHAPE);
        GenerateBenchmark flags = new GenerateBenchmark();
        new CommandLine(flags).parseArgs(required.toArray(String[]::new));
        writeRandomWeights(flags, weights);

        String single = generate(required, "tp1.json", "--tensor-model-parallel-size", "1");
        String split = generate(required, "tp2.json", "--tensor-model-parallel-size", "2");
        String engine = generate(required, "tp2-engine.json", "--tensor-model-parallel-size", "2", "--engine",
                "--max-model-len", "32");
        JsonObject ids = JsonParser.parseString(single).getAsJsonObject();
        assertEquals(2, ids.getAsJsonArray("2").size(), single);
        assertEquals(6, ids.getAsJsonArray("2").get(0).getAsJsonArray().size(), single);
        assertEquals(single, split, "TP2 through Generator");
        assertEquals(single, engine, "TP2 through the engine");
    }

    /** Runs the benchmark (batch sizes 1 and 2, 6 new tokens) and returns the ids it wrote. */
    private String generate(List<String> required, String output, String... more) throws IOException {
        List<String> args = new ArrayList<>(required);
        args.addAll(List.of("--batch-sizes", "1,2", "--num-tokens-to-generate", "6", "--warmup-tokens", "2",
                "--output", dir.resolve(output).toString()));
        args.addAll(Arrays.asList(more));
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        CommandLine cli = new CommandLine(new GenerateBenchmark());
        cli.setErr(new java.io.PrintWriter(err, true, StandardCharsets.UTF_8));
        int code = cli.execute(args.toArray(String[]::new));
        assertEquals(0, code, err.toString(StandardCharsets.UTF_8));
        return Files.readString(dir.resolve(output));
    }

    /** A single rank's randomly initialised weights as one float32 safetensors file of whole tensors. */
    private static void writeRandomWeights(GenerateBenchmark flags, Path file) throws IOException {
        Map<String, float[]> values = new java.util.LinkedHashMap<>();
        Map<String, long[]> shapes = new java.util.LinkedHashMap<>();
        InJvmWorld.run(1, rank -> {
            ModelContext ctx = ModelContext.create(flags.config(), rank.groups(ParallelDims.of(1, 1, 1)), rank.manager(),
                    new SeedScheme(7));
            GptModel model = GptModel.build(ctx, LayerSpec.tensorParallel(), new int[] {0, 1}, true, true);
            for (Map.Entry<String, Parameter> e : model.namedParameters("").entrySet()) {
                assertEquals(DataType.FLOAT32, e.getValue().data().getDataType());
                values.put(e.getKey(), e.getValue().data().toFloatArray());
                shapes.put(e.getKey(), e.getValue().data().getShape().getShape());
            }
            return null;
        });
        StringBuilder header = new StringBuilder("{");
        long offset = 0;
        for (String name : values.keySet()) {
            long bytes = 4L * values.get(name).length;
            header.append(header.length() > 1 ? "," : "").append('"').append(name).append("\":{\"dtype\":\"F32\",\"shape\":")
                    .append(Arrays.toString(shapes.get(name)).replace(" ", "")).append(",\"data_offsets\":[")
                    .append(offset).append(',').append(offset + bytes).append("]}");
            offset += bytes;
        }
        header.append('}');
        while ((8 + header.length()) % 8 != 0) {
            header.append(' ');
        }
        byte[] json = header.toString().getBytes(StandardCharsets.UTF_8);
        ByteBuffer buffer = ByteBuffer.allocate((int) (8 + json.length + offset)).order(ByteOrder.LITTLE_ENDIAN);
        buffer.putLong(json.length).put(json);
        for (float[] v : values.values()) {
            for (float x : v) {
                buffer.putFloat(x);
            }
        }
        assertTrue(buffer.remaining() == 0);
        Files.write(file, buffer.array());
    }
}
