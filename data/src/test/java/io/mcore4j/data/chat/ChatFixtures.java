package io.mcore4j.data.chat;

import io.mcore4j.data.preprocess.StrictJson;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The fixtures of scripts/hf/make_chat_fixtures.py: per tokenizer directory, transformers' renderings, ids and
 * assistant masks of a few conversations (expected.json), the templates and their generation-tagged copies.
 */
final class ChatFixtures {
    static final Path ROOT = Path.of("src", "test", "resources", "io", "mcore4j", "data", "chat");
    static final List<String> DIRECTORIES = List.of("qwen2", "llama", "mistral");

    private ChatFixtures() {}

    /** One case of expected.json, with the directory it belongs to. */
    record Case(Path dir, Map<String, Object> json) {
        String template() {
            return (String) json.get("template");
        }

        @SuppressWarnings("unchecked")
        List<Map<String, Object>> messages() {
            return (List<Map<String, Object>>) json.get("messages");
        }

        List<?> tools() {
            return (List<?>) json.get("tools");
        }

        @SuppressWarnings("unchecked")
        Map<String, Object> kwargs() {
            return (Map<String, Object>) json.get("kwargs");
        }

        /** The template file this case names: the directory's own, or name.jinja beside it. */
        Path templateFile() {
            Path other = dir.resolve(template() + ".jinja");
            return Files.isRegularFile(other) ? other : null;
        }

        @Override
        public String toString() {
            return dir.getFileName() + "/" + template() + ": " + json.get("title");
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> expected(String directory) {
        try {
            return (Map<String, Object>) StrictJson.parseKeepingIntegers(Files.readString(
                    ROOT.resolve(directory).resolve("expected.json"), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @SuppressWarnings("unchecked")
    static List<Case> cases() {
        List<Case> out = new ArrayList<>();
        for (String d : DIRECTORIES) {
            for (Object c : (List<Object>) expected(d).get("cases")) {
                out.add(new Case(ROOT.resolve(d), (Map<String, Object>) c));
            }
        }
        return out;
    }

    static int[] ints(Object list) {
        return ((List<?>) list).stream().mapToInt(v -> ((Number) v).intValue()).toArray();
    }
}
