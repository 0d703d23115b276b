package io.mcore4j.data.gpt;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** Reads the fixtures that scripts/megatron-fixtures/generate.py wrote from Megatron-LM's own code. */
final class MegatronFixtures {
    private MegatronFixtures() {}

    static JsonObject load(String name) {
        try (InputStream in = MegatronFixtures.class.getResourceAsStream("/megatron/" + name)) {
            if (in == null) {
                throw new IllegalStateException("missing test resource /megatron/" + name);
            }
            return JsonParser.parseReader(new InputStreamReader(in, StandardCharsets.UTF_8)).getAsJsonObject();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static int[] ints(JsonElement array) {
        JsonArray a = array.getAsJsonArray();
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsInt();
        }
        return out;
    }

    static long[] longs(JsonElement array) {
        JsonArray a = array.getAsJsonArray();
        long[] out = new long[a.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = a.get(i).getAsLong();
        }
        return out;
    }
}
