package io.mcore4j.data.tokenizer;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;

import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * The tokenizer fixtures of {@code scripts/tokenizer-fixtures/generate.py}: a tiny byte-level BPE (400 ids,
 * {@code <|endoftext|>} is id 0) as GPT-2's two files and as a {@code tokenizer.json}, and the ids the
 * Python libraries give for a few texts.
 */
public final class TokenizerFixtures {
    private TokenizerFixtures() {}

    /** One text and its ids: {@code gpt2} from transformers' GPT2Tokenizer, {@code hf} from tokenizers. */
    public record Case(String text, int[] gpt2, int[] hf) {}

    /** @return the folder holding the fixture files */
    public static Path directory() {
        try {
            return Path.of(TokenizerFixtures.class.getResource("/io/mcore4j/data/tokenizer/expected.json").toURI()).getParent();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** @return GPT-2's vocab.json of the fixture model */
    public static Path vocabFile() {
        return directory().resolve("gpt2-vocab.json");
    }

    /** @return GPT-2's merges.txt of the fixture model */
    public static Path mergeFile() {
        return directory().resolve("gpt2-merges.txt");
    }

    /** @return the tokenizer.json of the fixture model */
    public static Path tokenizerJson() {
        return directory().resolve("tokenizer.json");
    }

    private static JsonObject expected() throws IOException {
        return JsonParser.parseString(Files.readString(directory().resolve("expected.json"), StandardCharsets.UTF_8)).getAsJsonObject();
    }

    /**
     * @param which {@code gpt2} or {@code hf}
     * @return the vocabulary size Python reports
     * @throws IOException if the fixture cannot be read
     */
    public static int vocabularySize(String which) throws IOException {
        return expected().getAsJsonObject(which).get("vocab_size").getAsInt();
    }

    /**
     * @param which {@code gpt2} or {@code hf}
     * @return the end-of-document id Python reports
     * @throws IOException if the fixture cannot be read
     */
    public static int endOfDocument(String which) throws IOException {
        return expected().getAsJsonObject(which).get("eod").getAsInt();
    }

    /**
     * @return the texts and their ids
     * @throws IOException if the fixture cannot be read
     */
    public static List<Case> cases() throws IOException {
        List<Case> cases = new ArrayList<>();
        for (JsonElement e : expected().getAsJsonArray("cases")) {
            JsonObject c = e.getAsJsonObject();
            cases.add(new Case(c.get("text").getAsString(), ids(c.getAsJsonArray("gpt2")), ids(c.getAsJsonArray("hf"))));
        }
        return cases;
    }

    private static int[] ids(JsonArray array) {
        int[] ids = new int[array.size()];
        for (int k = 0; k < ids.length; k++) {
            ids[k] = array.get(k).getAsInt();
        }
        return ids;
    }
}
