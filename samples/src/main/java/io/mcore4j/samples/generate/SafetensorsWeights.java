package io.mcore4j.samples.generate;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDArrays;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import io.mcore4j.core.Tensors;
import io.mcore4j.core.nn.Parameter;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * Fills a model's parameters from one plain safetensors file of whole tensors whose names are the
 * parameters' own keys ({@code decoder.layers.0.self_attention.linear_qkv.weight}, ...): the form
 * {@code scripts/inference/gpu_generate_bench.py} writes, so that both sides of the benchmark run the
 * same weights. Every parameter must be present with its global shape; a tensor-parallel rank takes its part
 * by the parameter's {@link Parameter.Partition} (strided parts included); the dtype converts.
 */
final class SafetensorsWeights {
    private SafetensorsWeights() {}

    /**
     * @param file the safetensors file
     * @param parameters this rank's parameters by key (one pipeline stage, any tensor-parallel size)
     * @param scratch manager for the host-side copies, on the CPU
     * @throws IOException if the file cannot be read
     * @throws IllegalArgumentException naming a missing or misshapen tensor
     */
    static void load(Path file, Map<String, Parameter> parameters, NDManager scratch) throws IOException {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.READ)) {
            ByteBuffer length = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
            channel.read(length, 0);
            long headerBytes = length.getLong(0);
            ByteBuffer header = ByteBuffer.allocate((int) headerBytes);
            channel.read(header, 8);
            JsonObject entries = JsonParser.parseString(new String(header.array(), StandardCharsets.UTF_8)).getAsJsonObject();
            Set<String> missing = new HashSet<>(parameters.keySet());
            for (Map.Entry<String, JsonElement> e : entries.entrySet()) {
                Parameter p = parameters.get(e.getKey());
                if (p == null) {
                    continue; // __metadata__ and tensors the model does not have
                }
                JsonObject t = e.getValue().getAsJsonObject();
                long[] shape = new long[t.getAsJsonArray("shape").size()];
                for (int i = 0; i < shape.length; i++) {
                    shape[i] = t.getAsJsonArray("shape").get(i).getAsLong();
                }
                if (!Arrays.equals(shape, p.globalShape())) {
                    throw new IllegalArgumentException(e.getKey() + " has shape " + Arrays.toString(shape) + " in " + file
                            + ", the model expects " + Arrays.toString(p.globalShape()));
                }
                DataType dtype = switch (t.get("dtype").getAsString()) {
                    case "F16" -> DataType.FLOAT16;
                    case "F32" -> DataType.FLOAT32;
                    default -> throw new IllegalArgumentException(e.getKey() + " has dtype " + t.get("dtype")
                            + " in " + file + "; expected F16 or F32");
                };
                long begin = t.getAsJsonArray("data_offsets").get(0).getAsLong();
                long end = t.getAsJsonArray("data_offsets").get(1).getAsLong();
                ByteBuffer data = channel.map(FileChannel.MapMode.READ_ONLY, 8 + headerBytes + begin, end - begin)
                        .order(ByteOrder.LITTLE_ENDIAN);
                try (NDManager temp = scratch.newSubManager()) {
                    NDArray host = temp.create(data, new Shape(shape), dtype);
                    Tensors.copyInto(p.data(), part(host, p));
                }
                missing.remove(e.getKey());
            }
            if (!missing.isEmpty()) {
                throw new IllegalArgumentException(file + " lacks " + missing);
            }
        }
    }

    /** This rank's part of the whole tensor {@code global}: its partition's runs along the split dim, in local order. */
    private static NDArray part(NDArray global, Parameter p) {
        Parameter.Partition partition = p.partition();
        if (!partition.isSplit()) {
            return global;
        }
        int dim = partition.dim();
        NDList runs = new NDList();
        for (Parameter.Run run : partition.runs(p.data().getShape().get(dim))) {
            runs.add(Tensors.narrow(global, dim, run.globalStart(), run.globalStart() + run.length()));
        }
        return runs.size() == 1 ? runs.get(0) : NDArrays.concat(runs, dim);
    }
}
