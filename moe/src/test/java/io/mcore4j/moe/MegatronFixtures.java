package io.mcore4j.moe;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** Reading the JSON fixtures that scripts/megatron-fixtures/generate.py writes from Megatron-LM's own code. */
final class MegatronFixtures {
    private MegatronFixtures() {}

    /** @return the fixture {@code /megatron/<name>} of the test class path */
    static JsonObject read(String name) {
        try (InputStream in = MegatronFixtures.class.getResourceAsStream("/megatron/" + name)) {
            return JsonParser.parseReader(new InputStreamReader(in, StandardCharsets.UTF_8)).getAsJsonObject();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** A float32 {@code [rows, columns]} tensor of a JSON list of rows, owned by {@code m}. */
    static NDArray matrix(NDManager m, JsonArray rows) {
        int r = rows.size();
        int c = rows.get(0).getAsJsonArray().size();
        float[] values = new float[r * c];
        for (int i = 0; i < r; i++) {
            for (int j = 0; j < c; j++) {
                values[i * c + j] = rows.get(i).getAsJsonArray().get(j).getAsFloat();
            }
        }
        return m.create(values, new Shape(r, c));
    }

    /** A 0/1 map {@code [T, E]} as one string of '0' and '1' per row, the fixtures' form, rows joined by newlines. */
    static String bits(NDArray map) {
        int experts = (int) map.getShape().get(1);
        float[] v = map.toFloatArray();
        StringBuilder out = new StringBuilder();
        for (int t = 0; t < v.length / experts; t++) {
            if (t > 0) {
                out.append('\n');
            }
            for (int e = 0; e < experts; e++) {
                out.append(v[t * experts + e] != 0 ? '1' : '0');
            }
        }
        return out.toString();
    }

    /** A fixture's map (a list of row strings) in the form of {@link #bits}. */
    static String bits(JsonArray rows) {
        StringBuilder out = new StringBuilder();
        for (JsonElement row : rows) {
            if (out.length() > 0) {
                out.append('\n');
            }
            out.append(row.getAsString());
        }
        return out.toString();
    }
}
